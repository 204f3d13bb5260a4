package cli

import (
	"errors"
	"io"
	"strings"
	"testing"
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
	code := Run([]string{"serve", "--root", t.TempDir(), "--listen", "127.0.0.1:0", "--secure-metrics-listen", "127.0.0.1:0"}, io.Discard, &stderr)
	if code != ExitError || !strings.Contains(stderr.String(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("exit %d, stderr %q; want %d and a message naming KUBERNETES_SERVICE_HOST", code, stderr.String(), ExitError)
	}
}
