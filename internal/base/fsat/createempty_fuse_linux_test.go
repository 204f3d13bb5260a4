package fsat_test

import (
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestCreateEmptyRacesStalledFUSE: CreateEmpty writes the ready marker in
// a pod directory, where whoever can mount can put a file of a FUSE
// filesystem whose daemon never answers on the marker's name, before the
// call or between any two of its system calls. Opening that file waits
// for the daemon forever; CreateEmpty must never open it: it creates or
// keeps the marker, or returns an error, and never blocks.
func TestCreateEmptyRacesStalledFUSE(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	mounttest.Build(t, base, "dir meta", "file stalled ")
	stalled := filepath.Join(base, "stalled")
	mounttest.StalledFUSE(t, "stalled", stalled, "0100000")
	d, err := fsat.OpenRoot(filepath.Join(base, "meta"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	target := filepath.Join(base, "meta", "ready")
	create := func(what string) error {
		t.Helper()
		var returned atomic.Bool
		err := mounttest.Within(t, 5*time.Second, what, func() error {
			defer returned.Store(true)
			return d.CreateEmpty("ready", 0o600)
		})
		if !returned.Load() {
			t.FailNow()
		}
		return err
	}
	// Mounted before the call.
	mounttest.Build(t, base, "file meta/ready ")
	if err := unix.Mount(stalled, target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	if err := create("CreateEmpty of a name a stalled FUSE file is mounted on"); !errors.Is(err, fsat.ErrOtherMount) {
		t.Errorf("CreateEmpty on a stalled FUSE file = %v; want ErrOtherMount", err)
	}
	if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	// Mounted and unmounted during the calls, the marker present or not.
	binds := mounttest.BindFlicker(stalled, target, func() {
		_ = unix.Unlinkat(unix.AT_FDCWD, target, 0)
		if fd, err := unix.Open(target, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600); err == nil {
			unix.Close(fd)
		}
	})
	defer binds.Stop(t)
	const tries = 20000
	var created, refused int
	// Past tries, until the attacker has met the calls often enough (a
	// loaded machine can starve its thread), for at most a minute.
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < tries || (binds.Count() < 1000 && time.Now().Before(deadline)); i++ {
		switch err := create("CreateEmpty of a name a stalled FUSE file is mounted on and off"); {
		case err == nil:
			created++
		case errors.Is(err, fsat.ErrOtherMount):
			refused++
		case errors.Is(err, unix.EBUSY), errors.Is(err, unix.ENOENT), errors.Is(err, unix.EEXIST):
			refused++ // the attacker's unlink or create won the race
		default:
			t.Fatalf("CreateEmpty: %v", err)
		}
	}
	t.Logf("%d created or kept, %d refused, %d binds", created, refused, binds.Count())
	if binds.Count() == 0 {
		t.Error("no bind mount was made: the race was not tried")
	}
}
