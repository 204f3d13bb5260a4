package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodevol/nodevol/volume"
)

// TestSecondDriverOnOneRootIsRefused: a second instance of a driver on the
// kubelet root of a running one must not replace its sockets (the kubelet
// would then send it the first one's calls, both publishing and
// unpublishing the same targets at once): its Serve returns a
// *volume.RootLockedError naming the first, and the first one's sockets
// stay. A driver of another name serves beside it; once the first stops,
// the second serves.
func TestSecondDriverOnOneRootIsRefused(t *testing.T) {
	root := t.TempDir()
	dir, reg := socketDirs(t)
	opts := ServeOptions{Endpoint: filepath.Join(dir, "csi.sock"), RegistrationDir: reg}
	regSock := filepath.Join(reg, DefaultName+"-reg.sock")
	d1, _ := New(Config{NodeID: "n", KubeletRoot: root})
	d2, _ := New(Config{NodeID: "n", KubeletRoot: root})
	stop1 := serveAsync(t, d1, opts)
	waitSocket(t, opts.Endpoint)
	waitSocket(t, regSock)
	before := map[string]os.FileInfo{}
	for _, p := range []string{opts.Endpoint, regSock} {
		before[p], _ = os.Lstat(p)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a Serve that starts returns at once, having replaced the sockets
	err := d2.Serve(ctx, opts)
	var locked *volume.RootLockedError
	if !errors.As(err, &locked) || locked.HolderErr != nil || locked.Holder.PID != os.Getpid() || locked.Holder.Owner != volume.LockCSIDriver(DefaultName) {
		t.Errorf("Serve of a second %s driver on %s = %v; want a *volume.RootLockedError naming this process", DefaultName, root, err)
	}
	for p, fi := range before {
		if now, err := os.Lstat(p); err != nil || !os.SameFile(now, fi) {
			t.Errorf("the first driver's socket %s after the second one's Serve: %v; want it in place", p, err)
		}
	}

	other, _ := New(Config{NodeID: "n", KubeletRoot: root, Name: "other.example.com"})
	otherSock := filepath.Join(dir, "other.sock")
	stopOther := serveAsync(t, other, ServeOptions{Endpoint: otherSock})
	waitSocket(t, otherSock)
	stopOther()

	if err := d2.Serve(context.Background(), ServeOptions{Endpoint: opts.Endpoint, RootLock: mustLock(t, other)}); !errors.Is(err, ErrConfig) {
		t.Errorf("Serve with another driver's root lock = %v; want ErrConfig", err)
	}

	stop1()
	serveAsync(t, d2, opts)
	waitSocket(t, regSock)
}

func mustLock(t *testing.T, d *Driver) *volume.RootLock {
	t.Helper()
	lk, err := d.LockRoot()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Release() })
	return lk
}
