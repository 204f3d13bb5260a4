//go:build linux

package main

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// A demo that stops half-way (a broken promise, a failed SetUp) leaves its
// volumes mounted; cleanup must unmount them and still remove the sandbox.
func TestDemoCleanupUnmountsWhatIsLeft(t *testing.T) {
	mounttest.RequireMounts(t)
	tmp, err := os.MkdirTemp("", "nodevol-demo-test-")
	if err != nil {
		t.Fatal(err)
	}
	d := &demo{out: io.Discard, tmp: tmp}
	if err := d.build(); err != nil {
		t.Fatal(err)
	}
	scratch := filepath.Join(filepath.Dir(d.vol), "scratch")
	nested := filepath.Join(scratch, "nested")
	for _, dir := range []string{scratch, nested} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { // only if cleanup failed
		syscall.Unmount(nested, syscall.MNT_DETACH)
		syscall.Unmount(scratch, syscall.MNT_DETACH)
		os.RemoveAll(tmp)
	})
	d.mountedOnce = true
	if err := d.cleanup(); err != nil {
		t.Fatalf("cleanup() = %v; want nil", err)
	}
	if _, err := os.Lstat(tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cleanup left %s behind (%v)", tmp, err)
	}
}

// cancelAt is the demo's stdout in a test: when the demo writes marker, it
// cancels the demo as SIGINT does, before the write returns, so the demo
// is stopped exactly there.
type cancelAt struct {
	marker string
	cancel context.CancelCauseFunc
	out    strings.Builder
	seen   bool
}

func (w *cancelAt) Write(p []byte) (int, error) {
	w.out.Write(p)
	if !w.seen && strings.Contains(w.out.String(), w.marker) {
		w.seen = true
		w.cancel(&interruptedError{syscall.SIGINT})
	}
	return len(p), nil
}

// Wherever the demo is interrupted, it stops, unmounts what it mounted,
// removes its sandbox and exits 130.
func TestDemoInterrupted(t *testing.T) {
	for _, tc := range []struct {
		name, marker string
		mount        bool
	}{
		{"at the start", "nodevol demo: the volume manager", false},
		{"with the volumes set up", "  MountedVolumes(web), MountedVolumes(db):", false},
		{"during a teardown", "web is deleted; a teardown that followed the link", false},
		{"between two Managers", "Restart: Manager 1 stops", false},
		{"while the new Manager reconstructs", "Manager 2 starts on the same $ROOT", false},
		{"with volumes and a NAS mounted", "web is deleted. The kubelet would now os.RemoveAll($VOL)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iso := isolation{skip: "(a test: nothing is mounted)"}
			if tc.mount {
				mounttest.RequireMounts(t)
				iso = isolation{canMount: true}
			}
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			out := &cancelAt{marker: tc.marker, cancel: cancel}
			var stderr strings.Builder
			code := playDemo(ctx, iso, out, &stderr)
			t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.out.String(), stderr.String())
			if !out.seen {
				t.Fatalf("the demo never wrote %q", tc.marker)
			}
			if code != 130 || !regexp.MustCompile(`^nodevol demo: interrupted by SIGINT; the sandbox \S+ was cleaned up\n$`).MatchString(stderr.String()) {
				t.Errorf("exit %d, stderr %q; want 130 and that the sandbox was cleaned up", code, stderr.String())
			}
			wantEmptyDir(t, tmp)
			if mounts, err := mountPointsUnder(tmp); err != nil || len(mounts) > 0 {
				t.Errorf("mounts left under %s: %q (%v)", tmp, mounts, err)
			}
		})
	}

	// A signal once everything is done does not turn the demo's success
	// into a failure.
	t.Run("after the last step", func(t *testing.T) {
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		out := &cancelAt{marker: "\nOK: ", cancel: cancel}
		var stderr strings.Builder
		if code := playDemo(ctx, isolation{skip: "(a test)"}, out, &stderr); code != exitOK || !out.seen || stderr.Len() > 0 {
			t.Errorf("exit %d, stderr %q (OK written: %v); want 0 and nothing", code, stderr.String(), out.seen)
		}
		wantEmptyDir(t, tmp)
	})
}
