package agent

import (
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/cli"
)

func TestCheckServeArgs(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the error; "" for none
	}{
		{[]string{"--root=/host/var/lib/kubelet", "--host-root=/var/lib/kubelet", "--interval=10s", "--listen=:9477"}, ""},
		{nil, ""},
		{[]string{"--interval=10"}, "--interval"},
		{[]string{"--interval=0s"}, "must be positive"},
		{[]string{"--roots=/x"}, "did you mean --root?"},
		{[]string{"--root="}, "must not be empty"},
		{[]string{"--root=/a/../b"}, "--root"},
		{[]string{"/var/lib/kubelet"}, "takes no arguments"},
		{[]string{"-h"}, "help"},
		{[]string{"--version"}, "version"},
		{[]string{"--secure-metrics-listen=:9478"}, ""},
		{[]string{"--secure-metrics-listen=:9478", "--tls-cert-file=/tls/tls.crt", "--tls-private-key-file=/tls/tls.key", "--kube-api-server=https://10.0.0.1:443"}, ""},
		{[]string{"--secure-metrics-listen=:9478", "--tls-cert-file=/tls/tls.crt"}, "go together"},
		{[]string{"--tls-cert-file=/tls/tls.crt", "--tls-private-key-file=/tls/tls.key"}, "need --secure-metrics-listen"},
		{[]string{"--kube-api-server=https://10.0.0.1:443"}, "need --secure-metrics-listen"},
	}
	for _, tt := range tests {
		err := CheckServeArgs(tt.args)
		var ae *ArgsError
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckServeArgs(%q) = %v; want nil", tt.args, err)
		case tt.want != "" && (!errors.As(err, &ae) || !strings.Contains(ae.Message, tt.want)):
			t.Errorf("CheckServeArgs(%q) = %v; want an *ArgsError saying %q", tt.args, err, tt.want)
		}
	}
}

// TestServeIntervalLowerBound: an --interval under a second is refused
// with a message that says the bound and why, before anything starts; a
// second is the shortest taken.
func TestServeIntervalLowerBound(t *testing.T) {
	for _, arg := range []string{"--interval=1ms", "--interval=100ms", "--interval=999ms"} {
		err := CheckServeArgs([]string{arg})
		var ae *ArgsError
		if !errors.As(err, &ae) || !strings.Contains(ae.Message, "too short: at least 1s") {
			t.Errorf("CheckServeArgs(%s) = %v; want an *ArgsError saying it is too short, at least 1s", arg, err)
		}
	}
	if err := CheckServeArgs([]string{"--interval=1s"}); err != nil {
		t.Errorf("CheckServeArgs(--interval=1s) = %v; want nil", err)
	}
}

// TestServeSecureMetricsNeedsAnAPIServer: asked to serve /metrics
// securely where no API server can be found, serve says so and stops
// before serving anything, instead of serving the metrics to anyone.
func TestServeSecureMetricsNeedsAnAPIServer(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	var stderr strings.Builder
	code := Main([]string{"--root", t.TempDir(), "--listen", "127.0.0.1:0", "--secure-metrics-listen", "127.0.0.1:0"}, io.Discard, &stderr)
	if code != cli.ExitError || !strings.Contains(stderr.String(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("exit %d, stderr %q; want %d and a message naming KUBERNETES_SERVICE_HOST", code, stderr.String(), cli.ExitError)
	}
}

// TestAgentHelp: the agent's help (which "nodevol serve -h" and "nodevol
// help serve" print, running it) begins with the synopsis nodevol's usage
// lists for serve and cmd/nodevol-agent's documentation gives, and lists
// every flag the synopsis names with two dashes, as the synopsis writes
// them.
func TestAgentHelp(t *testing.T) {
	var stdout, stderr strings.Builder
	if code := Main([]string{"-h"}, &stdout, &stderr); code != cli.ExitOK || stderr.Len() > 0 {
		t.Fatalf("nodevol-agent -h: exit %d, stderr %q; want 0 and nothing", code, stderr.String())
	}
	synopsis := cli.AgentName + " " + cli.ServeSynopsis
	if first, _, _ := strings.Cut(stdout.String(), "\n"); first != "Usage: "+synopsis {
		t.Errorf("nodevol-agent -h begins %q; want %q", first, "Usage: "+synopsis)
	}
	src, err := os.ReadFile("../../cmd/nodevol-agent/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "\n//\t"+synopsis+"\n") {
		t.Errorf("the package documentation in cmd/nodevol-agent/main.go does not list %q", synopsis)
	}
	_, flags, ok := strings.Cut(stdout.String(), "\nFlags:\n")
	if !ok {
		t.Fatalf("nodevol-agent -h lists no flags:\n%s", stdout.String())
	}
	for _, f := range regexp.MustCompile(`--[a-z][a-z-]*`).FindAllString(cli.ServeSynopsis, -1) {
		if !strings.Contains(flags, "\n  "+f+" ") && !strings.HasPrefix(flags, "  "+f+" ") {
			t.Errorf("nodevol-agent -h: the synopsis names %s, the flags do not list it:\n%s", f, flags)
		}
	}
}
