package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// TestTeardownRefusedWhileAVolumeManagerRuns: a teardown while a
// reconciler.Manager runs on the same kubelet root would race its
// operations on the same volume (the Manager would set it up again, or
// tear it down at the same time). While another process holds the root's
// volume-manager lock, teardown changes nothing and names the holder
// (exit 2); a dry run still answers; once the lock is free the teardown
// goes through, and releases the lock when it ends.
func TestTeardownRefusedWhileAVolumeManagerRuns(t *testing.T) {
	k := newKubelet(t, mounttest.RealTempDir(t))
	vol := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
	if err := os.WriteFile(filepath.Join(vol, "data"), []byte("in use"), 0o644); err != nil {
		t.Fatal(err)
	}
	since := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	manager, err := volume.LockRoot(k.layout, volume.LockVolumeManager, volume.LockOptions{Program: "my-kubelet", Clock: clocktesting.NewFakePassiveClock(since)})
	if err != nil {
		t.Fatal(err)
	}
	defer manager.Release()

	r := nodevol(t, "teardown", allowForeign, vol)
	r.wantCode(t, ExitError)
	wantContains(t, "stderr", r.stderr, fmt.Sprintf("held by PID %d (my-kubelet) since 2026-11-27T08:00:00Z", os.Getpid()), manager.Path())
	if b, err := os.ReadFile(filepath.Join(vol, "data")); err != nil || string(b) != "in use" {
		t.Fatalf("the volume after a teardown refused by the lock: %q, %v; want it untouched", b, err)
	}
	if _, err := os.Stat(k.ready(t, testUID, "cache")); err != nil {
		t.Errorf("the ready marker after a teardown refused by the lock: %v", err)
	}
	nodevol(t, "teardown", allowForeign, "--dry-run", vol).wantCode(t, ExitOK)

	manager.Release()
	nodevol(t, "teardown", allowForeign, vol).wantCode(t, ExitOK)
	mustNotExist(t, vol)
	// The teardown released the lock when it ended.
	again, err := volume.LockRoot(k.layout, volume.LockVolumeManager, volume.LockOptions{})
	if err != nil {
		t.Fatalf("the volume-manager lock after teardown: %v", err)
	}
	again.Release()
}
