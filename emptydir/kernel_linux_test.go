package emptydir

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TmpfsNoswap's answer is what mount(2) does with the option, and it is
// the one SetUp follows.
func TestTmpfsNoswap(t *testing.T) {
	ok, err := TmpfsNoswap()
	t.Logf("TmpfsNoswap() = %v, %v", ok, err)
	if os.Geteuid() != 0 {
		if err == nil || !errors.Is(err, unix.EPERM) {
			t.Errorf("TmpfsNoswap() without root = %v, %v; want it unable to ask (EPERM), not an answer", ok, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("TmpfsNoswap() as root = %v", err)
	}
	if kernelSupportsNoswap() != ok {
		t.Errorf("SetUp passes noswap: %v; TmpfsNoswap says %v", kernelSupportsNoswap(), ok)
	}
	mounttest.RequireMounts(t)
	dir := t.TempDir()
	merr := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,noswap")
	if merr == nil {
		t.Cleanup(func() { _ = detach(dir) })
		if info := mountEntry(t, dir); !strings.Contains(info.VFSOptions, "noswap") {
			t.Errorf("a tmpfs mounted with noswap shows %q", info.VFSOptions)
		}
	}
	if (merr == nil) != ok {
		t.Errorf("mount -o noswap: %v; TmpfsNoswap says %v", merr, ok)
	}
}

func TestMountAPI(t *testing.T) {
	ok, err := MountAPI()
	t.Logf("MountAPI() = %v, %v", ok, err)
	if os.Geteuid() != 0 {
		if err == nil || !errors.Is(err, unix.EPERM) {
			t.Errorf("MountAPI() without root = %v, %v; want it unable to ask (EPERM), not an answer", ok, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("MountAPI() as root = %v", err)
	}
	// The probe's mount was detached and dropped: nothing new is mounted.
	before, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := probeMountAPI(); again != ok || err != nil {
		t.Fatalf("probeMountAPI() = %v, %v; MountAPI() said %v", again, err, ok)
	}
	if after, _ := os.ReadFile("/proc/self/mountinfo"); string(after) != string(before) {
		t.Errorf("the mount table changed after MountAPI")
	}
}
