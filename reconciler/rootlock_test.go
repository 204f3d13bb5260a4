package reconciler

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/volume"
)

// TestSecondManagerOnOneRootIsRefused: a second Manager on a kubelet root
// whose first Manager runs would find the first one's volumes on disk,
// wanted by none of its pods, and tear them down once its sources were
// ready. Its Run returns at once a *volume.RootLockedError naming the
// first (this process, since the first Run began), having touched
// nothing: the first one's volume keeps its data byte for byte. Once the
// first Run has returned, a new Manager runs on the root.
func TestSecondManagerOnOneRootIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		started := time.Now() // the bubble's clock: it stands still until something waits
		e1 := startManager(t, root, Options{})
		if err := e1.m.AddPod(pod("p1", "cache")); err != nil {
			t.Fatal(err)
		}
		if err := e1.m.WaitForMount(waitCtx(t, 10*time.Second), "p1"); err != nil {
			t.Fatal(err)
		}
		sentinel := filepath.Join(e1.volDir("p1", "cache"), "data")
		if err := os.WriteFile(sentinel, []byte("precious"), 0o644); err != nil {
			t.Fatal(err)
		}

		newManager := func() *Manager {
			l, err := volume.NewLayout(root)
			if err != nil {
				t.Fatal(err)
			}
			m, err := New(Options{Root: root, Plugins: []volume.Plugin{emptydir.New(volume.NewHost(l, nil, 0))}, Registerer: prometheus.NewRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			m.MarkSourcesReady() // it knows no pod: everything on disk is unwanted
			return m
		}
		m2 := newManager()
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- m2.Run(ctx) }()
		synctest.Wait() // everything the second Manager would do is done
		var err error
		select {
		case err = <-done:
		default:
			cancel()
			err = <-done
			t.Errorf("the second Manager on %s ran (Run = %v after it was stopped); want its Run refused at once", root, err)
		}
		var locked *volume.RootLockedError
		if !errors.As(err, &locked) || !errors.Is(err, volume.ErrRootLocked) {
			t.Errorf("second Run = %v; want a *volume.RootLockedError", err)
		} else if h := locked.Holder; locked.HolderErr != nil || h.PID != os.Getpid() || h.Program != filepath.Base(os.Args[0]) || !h.Since.Equal(started) || h.Owner != volume.LockVolumeManager {
			t.Errorf("second Run's error names %+v (%v); want PID %d (%s) since %v", h, locked.HolderErr, os.Getpid(), filepath.Base(os.Args[0]), started)
		}
		if err != nil && !strings.Contains(err.Error(), root) {
			t.Errorf("second Run's error %q does not name the root %s", err, root)
		}
		if b, err := os.ReadFile(sentinel); err != nil || string(b) != "precious" {
			t.Fatalf("the first Manager's volume after the second Manager's Run: %q, %v; want it intact", b, err)
		}

		e1.stop()
		m3 := newManager()
		cancel3, res := goRun(t, m3)
		<-m3.Reconstructed()
		cancel3()
		if err := <-res; err != nil {
			t.Errorf("Run of a new Manager after the first one's Run returned = %v; want nil", err)
		}
	})
}
