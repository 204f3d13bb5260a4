package privatens

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

const testEnv = "NODEVOL_MOUNTNS_TEST_PARENT"

// TestMain lets the test binary act as the child: with NODEVOL_MOUNTNS_REPORT
// set it prints what Child says and exits.
func TestMain(m *testing.M) {
	if os.Getenv("NODEVOL_MOUNTNS_REPORT") != "" {
		if Child(testEnv) {
			os.Stdout.WriteString("child\n")
		} else {
			os.Stdout.WriteString("not child\n")
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestChild: a child Reexec started in a new mount namespace is one; the
// same binary started on the host with the variable set by hand — to any
// value, the parent's namespace included — is not, whatever the variable
// says: the parent's real namespace is read from /proc.
func TestChild(t *testing.T) {
	own, err := ownNamespace()
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		var out bytes.Buffer
		code, err := Reexec(testEnv, nil, Streams{Stdout: &out, Env: []string{"NODEVOL_MOUNTNS_REPORT=1"}})
		if err != nil || code != 0 || out.String() != "child\n" {
			t.Errorf("Reexec child: code %d, err %v, says %q; want child", code, err, out.String())
		}
	} else if os.Getenv("CI") == "true" {
		t.Error("not root: Reexec cannot be tested (CI=true: this must not pass silently)")
	}
	for _, spoof := range []string{own, "mnt:[4026531840]", "mnt:[1]", "x"} {
		cmd := exec.Command("/proc/self/exe")
		cmd.Env = append(os.Environ(), "NODEVOL_MOUNTNS_REPORT=1", testEnv+"="+spoof)
		out, err := cmd.Output()
		if err != nil || string(out) != "not child\n" {
			t.Errorf("%s=%s on the host: says %q (%v); want not child", testEnv, spoof, out, err)
		}
	}
}
