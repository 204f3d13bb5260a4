package emptydir

// Adversarial tests of teardown: an attacker who can write into the pod
// directory (or a container with bidirectional mount propagation) controls
// names, symlinks, mounts and file contents below the kubelet root and can
// change them between any two system calls. Each test checks sentinels on
// every other mount and outside the root byte for byte.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// raceIterations is how often the swap races run: thousands, as the
// RemoveAll race tests do.
const raceIterations = 1000

// TestTearDownSymlinkSwapRace: while TearDown runs, the volume
// directory is exchanged again and again with a symlink to another tmpfs.
// Whatever TearDown concludes, that tmpfs stays mounted with its data.
func TestTearDownSymlinkSwapRace(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, medium := range []volume.StorageMedium{"", "Memory"} {
		t.Run("medium="+string(medium), func(t *testing.T) {
			base := t.TempDir()
			victim := filepath.Join(base, "victim")
			mounttest.Tmpfs(t, victim, "size=1m")
			want := mounttest.Sentinels(t, victim)
			e := newEnv(t, filepath.Join(base, "kubelet"), nil)
			pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: medium, SizeLimit: 1 << 20}})
			pod.MemoryLimit = 64 << 20
			vols := filepath.Dir(e.setUp(t, pod, "cache").Path())
			vfd, err := unix.Open(vols, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(vfd)
			if err := os.Symlink(victim, filepath.Join(vols, "swap")); err != nil {
				t.Fatal(err)
			}
			a := mounttest.StartAttacker(t, func() error { return mounttest.Exchange(vfd, "cache", "swap") })

			outcomes, samples := map[string]int{}, map[string]int{}
			raced := 0
			for i := range raceIterations {
				if i > 0 {
					e.setUp(t, pod, "cache")
				}
				before := a.Steps()
				a.Resume()
				err := e.tearDown("cache")
				a.Pause()
				if a.Steps() != before {
					raced++
				}
				outcomes[outcome(err)]++
				if err != nil && outcome(err) == "error" && samples[outcome(err)] < 3 {
					samples[outcome(err)]++
					t.Logf("sample error: %v", err)
				}

				if !mounttest.IsMountRoot(t, victim) {
					t.Fatalf("iteration %d: the victim tmpfs was unmounted (TearDown: %v)", i, err)
				}
				mounttest.Intact(t, victim, want)
				if t.Failed() {
					t.Fatalf("iteration %d: the victim's data changed (TearDown: %v)", i, err)
				}
				mounttest.RestoreSwap(t, vols, "cache", "swap", victim)
				_ = os.RemoveAll(e.metaDir(t, "cache"))
			}
			t.Logf("%d iterations, %d raced with an exchange; outcomes %v", raceIterations, raced, outcomes)
			if raced < raceIterations/10 {
				t.Errorf("only %d of %d teardowns overlapped an exchange: the race was not exercised", raced, raceIterations)
			}
		})
	}
}

// outcome sorts TearDown results for the log.
func outcome(err error) string {
	var refused *RefusedError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &refused):
		return "refused"
	default:
		return "error"
	}
}

// TestTearDownRefusesMountsItDidNotMake: only a single mount
// that matches SetUp's record is ever unmounted.
func TestTearDownRefusesMountsItDidNotMake(t *testing.T) {
	mounttest.RequireMounts(t)
	cases := []struct {
		name   string
		medium volume.StorageMedium
		// mount makes the foreign mount(s) on the volume directory and
		// returns the directory holding the foreign data.
		mount  func(t *testing.T, base, vol string) string
		reason string
		code   ReasonCode
	}{
		{"tmpfs on a Default volume", "", func(t *testing.T, base, vol string) string {
			mounttest.Mount(t, "nas:/export", vol, "tmpfs", 0, "size=1m")
			return vol
		}, "Default-medium", ReasonForeignMount},
		{"tmpfs stacked on a Memory volume", "Memory", func(t *testing.T, base, vol string) string {
			mounttest.Mount(t, "nas:/export", vol, "tmpfs", 0, "size=1m")
			return vol
		}, "stacked", ReasonStackedMounts},
		{"Memory volume's tmpfs replaced by another", "Memory", func(t *testing.T, base, vol string) string {
			if err := unix.Unmount(vol, 0); err != nil {
				t.Fatal(err)
			}
			mounttest.Mount(t, "tmpfs", vol, "tmpfs", 0, "size=1m")
			return vol
		}, "not the mount SetUp made", ReasonForeignMount},
		{"bind of a foreign directory on a Memory volume's place", "Memory", func(t *testing.T, base, vol string) string {
			if err := unix.Unmount(vol, 0); err != nil {
				t.Fatal(err)
			}
			share := filepath.Join(base, "share")
			if err := os.MkdirAll(share, 0o755); err != nil {
				t.Fatal(err)
			}
			mounttest.Bind(t, share, vol)
			return share
		}, "not the mount SetUp made", ReasonForeignMount},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			e := newEnv(t, filepath.Join(base, "kubelet"), nil)
			pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: c.medium, SizeLimit: 1 << 20}})
			pod.MemoryLimit = 64 << 20
			vol := e.setUp(t, pod, "cache").Path()
			t.Cleanup(func() {
				for mounttest.IsMountRoot(t, vol) {
					_ = detach(vol)
				}
			})
			data := c.mount(t, base, vol)
			want := mounttest.Sentinels(t, data)
			mounts := countMounts(t, vol)
			whole := mounttest.Snapshot(t, base)

			plan, err := e.plugin.PlanTearDown(testUID, "cache", nil)
			if err != nil || plan.Action != ActionRefuse || !strings.Contains(plan.Reason, c.reason) || plan.Code != c.code {
				t.Errorf("PlanTearDown = %v %v %q, %v; want a refusal (%v) saying %q", plan.Action, plan.Code, plan.Reason, err, c.code, c.reason)
			}
			err = e.tearDown("cache")
			var refused *RefusedError
			if !errors.As(err, &refused) || !errors.Is(err, mountdetect.ErrCrossesMount) || !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("TearDown = %v; want a refusal saying %q", err, c.reason)
			}
			if len(refused.Plan.Mounts) == 0 || refused.Plan.Mounts[len(refused.Plan.Mounts)-1].MountPoint != vol {
				t.Errorf("refusal names %+v; want the mount on %s", refused.Plan.Mounts, vol)
			}
			if got := countMounts(t, vol); got != mounts {
				t.Errorf("%d mounts on the volume directory after the refusal; want %d (nothing unmounted)", got, mounts)
			}
			mounttest.Intact(t, data, want)
			mounttest.Intact(t, base, whole)
			if !isReady(e.metaDir(t, "cache")) {
				t.Error("a refused TearDown removed the ready marker")
			}
		})
	}
}

// countMounts counts the mount table entries whose mount point is dir.
func countMounts(t *testing.T, dir string) int {
	t.Helper()
	tab, err := mountdetect.ReadMountTable()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	at, _, err := tab.MountsAtFile(fd, dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(at)
}

// TestSymlinksBelowRootAreNotFollowed: every directory between
// the kubelet root and the volume, and the metadata directory, replaced by
// a symlink to the same place in another kubelet tree (with a Memory
// volume set up there): every entry point fails naming the symlink, and
// the other tree keeps its mount, metadata and data.
func TestSymlinksBelowRootAreNotFollowed(t *testing.T) {
	mounttest.RequireMounts(t)
	components := []string{
		"pods",
		"pods/" + testUID,
		"pods/" + testUID + "/volumes",
		"pods/" + testUID + "/volumes/kubernetes.io~empty-dir",
		"pods/" + testUID + "/plugins",
		"pods/" + testUID + "/plugins/kubernetes.io~empty-dir",
		"pods/" + testUID + "/plugins/kubernetes.io~empty-dir/cache",
	}
	for _, comp := range components {
		t.Run(strings.ReplaceAll(comp, testUID, "UID"), func(t *testing.T) {
			base := t.TempDir()
			other := newEnv(t, filepath.Join(base, "other"), nil)
			pod := other.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", SizeLimit: 1 << 20}})
			pod.MemoryLimit = 64 << 20
			otherVol := other.setUp(t, pod, "cache").Path()
			t.Cleanup(func() { _ = detach(otherVol) })
			want := mounttest.Sentinels(t, otherVol)
			whole := mounttest.Snapshot(t, filepath.Join(base, "other"))

			e := newEnv(t, filepath.Join(base, "kubelet"), nil)
			e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache")
			link := filepath.Join(e.root, comp)
			if err := os.RemoveAll(link); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(other.root, comp), link); err != nil {
				t.Fatal(err)
			}
			volPath := filepath.Join(e.root, "pods", testUID, "volumes/kubernetes.io~empty-dir/cache")

			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, fsat.ErrSymlink) || !strings.Contains(err.Error(), link) {
					t.Errorf("%s = %v; want an error naming the symlink %s", what, err, link)
				}
			}
			_, err := e.plugin.PlanTearDown(testUID, "cache", nil)
			check("PlanTearDown", err)
			check("TearDown", e.tearDown("cache"))
			_, err = e.plugin.ConstructSpec("cache", volPath)
			check("ConstructSpec", err)
			_, err = e.plugin.Usage(testUID, "cache")
			check("Usage", err)
			m, err := e.plugin.NewMounter(e.pod(emptyDirSpec("cache", "")).Volume("cache"), e.pod(emptyDirSpec("cache", "")))
			if err != nil {
				t.Fatal(err)
			}
			check("SetUp", m.SetUp(e.ctx, volume.MounterArgs{}))

			if !mounttest.IsMountRoot(t, otherVol) {
				t.Error("the other tree's tmpfs was unmounted")
			}
			mounttest.Intact(t, otherVol, want)
			mounttest.Intact(t, filepath.Join(base, "other"), whole)
		})
	}
}

// TestHostileMetadata: nodevol.json as a FIFO, a symlink to
// /dev/zero or to a file outside, a directory or a huge sparse file: every
// reader returns a clear error at once, and a refused teardown changes
// nothing.
func TestHostileMetadata(t *testing.T) {
	mounttest.RequireMounts(t)
	cases := []struct {
		name  string
		plant func(t *testing.T, path, outside string)
		want  error
	}{
		{"fifo", func(t *testing.T, path, _ string) {
			if err := unix.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, fsat.ErrNotRegular},
		{"symlink to /dev/zero", func(t *testing.T, path, _ string) {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}, fsat.ErrSymlink},
		{"symlink to a file outside", func(t *testing.T, path, outside string) {
			if err := os.Symlink(filepath.Join(outside, "sentinel-file"), path); err != nil {
				t.Fatal(err)
			}
		}, fsat.ErrSymlink},
		{"directory", func(t *testing.T, path, _ string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, fsat.ErrNotRegular},
		{"huge sparse file", func(t *testing.T, path, _ string) {
			if err := os.WriteFile(path, []byte(`{"medium":"Default"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, 256<<20); err != nil {
				t.Fatal(err)
			}
		}, fsat.ErrTooLarge},
	}
	for _, medium := range []volume.StorageMedium{"", "Memory"} {
		for _, c := range cases {
			t.Run(string(medium)+"/"+c.name, func(t *testing.T) {
				base := t.TempDir()
				outside := filepath.Join(base, "outside")
				outsideWant := mounttest.Sentinels(t, outside)
				e := newEnv(t, filepath.Join(base, "kubelet"), nil)
				pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: medium, SizeLimit: 1 << 20}})
				pod.MemoryLimit = 64 << 20
				vol := e.setUp(t, pod, "cache").Path()
				t.Cleanup(func() {
					for mounttest.IsMountRoot(t, vol) {
						_ = detach(vol)
					}
				})
				mounttest.Build(t, vol, "file pod-data keep")
				meta := filepath.Join(e.metaDir(t, "cache"), metaFileName)
				if err := os.Remove(meta); err != nil {
					t.Fatal(err)
				}
				c.plant(t, meta, outside)
				volWant := mounttest.Snapshot(t, vol)
				whole := mounttest.Snapshot(t, e.root)

				check := func(what string, fn func() error) {
					t.Helper()
					err := withDeadline(t, what, fn)
					if !errors.Is(err, c.want) || !strings.Contains(err.Error(), meta) {
						t.Errorf("%s = %v; want an error matching %q naming %s", what, err, c.want, meta)
					}
				}
				check("PlanTearDown", func() error {
					plan, err := e.plugin.PlanTearDown(testUID, "cache", nil)
					if err == nil {
						err = plan.metaErr
					}
					return err
				})
				check("TearDown", func() error { return e.tearDown("cache") })
				check("ConstructSpec", func() error { _, err := e.plugin.ConstructSpec("cache", vol); return err })
				check("Usage", func() error { _, err := e.plugin.Usage(testUID, "cache"); return err })
				check("SetUp", func() error {
					m, err := e.plugin.NewMounter(pod.Volume("cache"), pod)
					if err != nil {
						return err
					}
					return m.SetUp(e.ctx, volume.MounterArgs{})
				})

				mounttest.Intact(t, vol, volWant)
				mounttest.Intact(t, e.root, whole)
				mounttest.Intact(t, outside, outsideWant)
				if medium == "Memory" && !mounttest.IsMountRoot(t, vol) {
					t.Error("the volume's tmpfs was unmounted")
				}
			})
		}
	}
}

// withDeadline runs fn and fails the test (instead of hanging it) when fn
// has not returned within ten seconds.
func withDeadline(t *testing.T, what string, fn func() error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		t.Fatalf("%s did not return within 10s: it blocks", what)
		return nil
	}
}
