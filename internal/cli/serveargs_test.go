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
