package cli

import (
	"errors"
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
