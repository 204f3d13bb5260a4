package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// cliRaceIterations per medium: each iteration sets a volume up and runs
// the built binary once (about 40 ms on two cores with the attacker
// spinning), so the CLI race runs a thousand times in all; the library's
// own race test runs the same teardown code a thousand times per medium.
const cliRaceIterations = 500

// TestTeardownCLISwapRace, through the built CLI: while `nodevol
// teardown` runs, the volume directory is exchanged again and again with
// a symlink to another tmpfs, by a thread in a mount namespace of its own
// (so it can rename the Memory volume's mount point). Whatever the command
// reports, that tmpfs stays mounted and its data byte for byte.
func TestTeardownCLISwapRace(t *testing.T) {
	mounttest.RequireMounts(t)
	bin := buildBinary(t)
	for _, medium := range []volume.StorageMedium{"", volume.StorageMediumMemory} {
		t.Run("medium="+string(medium), func(t *testing.T) {
			base := mounttest.RealTempDir(t)
			victim := filepath.Join(base, "victim")
			mounttest.Tmpfs(t, victim, "size=1m")
			want := mounttest.Sentinels(t, victim)
			k := newKubelet(t, base)
			src := volume.EmptyDirSource{Medium: medium}
			vol := k.setUp(t, testUID, "cache", src)
			vols := filepath.Dir(vol)
			vfd, err := unix.Open(vols, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(vfd)
			swap := filepath.Join(vols, "swap")
			if err := os.Symlink(victim, swap); err != nil {
				t.Fatal(err)
			}
			a := mounttest.StartAttacker(t, func() error { return mounttest.Exchange(vfd, "cache", "swap") })
			codes := map[int]int{}
			raced := 0
			for i := range cliRaceIterations {
				if i > 0 {
					k.setUp(t, testUID, "cache", src)
				}
				before := a.Steps()
				a.Resume()
				r := bin.runQuiet(t, "teardown", allowForeign, vol)
				a.Pause()
				if a.Steps() != before {
					raced++
				}
				codes[r.code]++
				if !mounttest.IsMountRoot(t, victim) {
					t.Fatalf("iteration %d: the victim tmpfs was unmounted (exit %d, stdout %q, stderr %q)", i, r.code, r.stdout, r.stderr)
				}
				mounttest.Intact(t, victim, want)
				if t.Failed() {
					t.Fatalf("iteration %d: the victim's data changed (exit %d, stdout %q, stderr %q)", i, r.code, r.stdout, r.stderr)
				}
				mounttest.RestoreSwap(t, vols, "cache", "swap", victim)
				if err := os.RemoveAll(filepath.Dir(k.ready(t, testUID, "cache"))); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%d runs, %d raced with an exchange; exit codes %v", cliRaceIterations, raced, codes)
			if raced < cliRaceIterations/10 {
				t.Errorf("only %d of %d runs overlapped an exchange: the race was not exercised", raced, cliRaceIterations)
			}
		})
	}
}

// TestCLIHostilePodDirectory, through the built CLI: nodevol.json as a
// FIFO or a symlink to /dev/zero, and a symlinked metadata or volumes
// directory: teardown, teardown --dry-run and scan answer at once with an
// error naming the culprit and change nothing, and nothing behind a
// symlink is touched.
func TestCLIHostilePodDirectory(t *testing.T) {
	mounttest.RequireMounts(t)
	bin := buildBinary(t)
	cases := []struct {
		name  string
		plant func(t *testing.T, k *kubelet, base string) (culprit string)
		want  string
	}{
		{"nodevol.json is a FIFO", func(t *testing.T, k *kubelet, base string) string {
			p := filepath.Join(filepath.Dir(k.ready(t, testUID, "cache")), "nodevol.json")
			os.Remove(p)
			if err := unix.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, "not a regular file"},
		{"nodevol.json is a symlink to /dev/zero", func(t *testing.T, k *kubelet, base string) string {
			p := filepath.Join(filepath.Dir(k.ready(t, testUID, "cache")), "nodevol.json")
			os.Remove(p)
			if err := os.Symlink("/dev/zero", p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "symlink"},
		{"metadata directory is a symlink", func(t *testing.T, k *kubelet, base string) string {
			p := filepath.Dir(k.ready(t, testUID, "cache"))
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(base, "outside"), p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "symlink"},
		{"volumes directory is a symlink", func(t *testing.T, k *kubelet, base string) string {
			vols := filepath.Dir(k.dir(t, testUID, "kubernetes.io/empty-dir", "cache"))
			if err := os.Rename(vols, filepath.Join(base, "outside", "moved-volumes")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(base, "outside", "moved-volumes"), vols); err != nil {
				t.Fatal(err)
			}
			return vols
		}, "symlink"},
	}
	for _, medium := range []volume.StorageMedium{"", volume.StorageMediumMemory} {
		for _, c := range cases {
			t.Run(string(medium)+"/"+c.name, func(t *testing.T) {
				base := mounttest.RealTempDir(t)
				mounttest.Build(t, filepath.Join(base, "outside"), "file nodevol.json {\"medium\":\"Default\"}", "file ready", "file keep precious")
				k := newKubelet(t, base)
				vol := k.setUp(t, testUID, "cache", volume.EmptyDirSource{Medium: medium})
				mounttest.Build(t, vol, "file pod-data keep")
				culprit := c.plant(t, k, base)
				before := mounttest.Snapshot(t, base)
				for _, args := range [][]string{{"teardown", allowForeign, "--dry-run", vol}, {"teardown", allowForeign, vol}, {"scan", "--root", k.root}} {
					done := make(chan result, 1)
					go func() { done <- bin.runQuiet(t, args...) }()
					var r result
					select {
					case r = <-done:
					case <-time.After(20 * time.Second):
						t.Fatalf("nodevol %q did not return within 20s: it blocks", args)
					}
					if r.code == ExitOK || !strings.Contains(r.stdout+r.stderr, culprit) || !strings.Contains(r.stdout+r.stderr, c.want) {
						t.Errorf("nodevol %q: exit %d\nstdout %s\nstderr %s\nwant a failure naming %s (%s)", args, r.code, r.stdout, r.stderr, culprit, c.want)
					}
				}
				mounttest.Intact(t, base, before)
				if medium == volume.StorageMediumMemory && !mounttest.IsMountRoot(t, vol) && !mounttest.IsMountRoot(t, filepath.Join(base, "outside", "moved-volumes", "cache")) {
					t.Error("the volume's tmpfs was unmounted")
				}
			})
		}
	}
}
