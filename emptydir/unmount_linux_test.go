package emptydir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/testhook"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// TestTearDownRenamerRace: a renamer in another mount namespace — one
// made before the mounts, where the volume's tmpfs and the NAS beside it
// are plain directories, without CAP_LINUX_IMMUTABLE as in a container's
// default capabilities — exchanges the volume directory with the NAS's
// mount point again and again while TearDown runs. umount2 names what it
// unmounts by path; with the NAS under the volume's name at that instant,
// it would unmount the NAS, a tmpfs here, whose contents die with it.
// Whatever TearDown concludes, the NAS stays mounted with its data, byte
// for byte, and no directory is left immutable. With the kubelet root a
// shared mount (on tmpfs) and a Bidirectional peer, the volume's unmount
// also reaches the peer's copy; the private root is a plain directory (on
// the disk's filesystem).
func TestTearDownRenamerRace(t *testing.T) {
	mounttest.RequireMounts(t)
	iterations := raceIterations
	if testing.Short() {
		iterations = 200
	}
	for _, tc := range []struct {
		name   string
		shared bool
	}{
		{"private root", false},
		{"shared root with a Bidirectional peer", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kubelet := filepath.Join(t.TempDir(), "kubelet")
			var peer *mounttest.NamespaceThread
			if tc.shared {
				mounttest.Tmpfs(t, kubelet, "size=16m")
				if err := unix.Mount("", kubelet, "", unix.MS_SHARED, ""); err != nil {
					t.Fatal(err)
				}
				peer = mounttest.StartPeer(t)
			}
			e := newEnv(t, kubelet, nil)
			pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", SizeLimit: 1 << 20}})
			pod.MemoryLimit = 64 << 20
			vols, vfd := e.volumesDir(t)
			vol := filepath.Join(vols, "cache")
			nas := filepath.Join(vols, "nas")
			if err := os.Mkdir(nas, 0o750); err != nil {
				t.Fatal(err)
			}
			nasIno := inodeOf(t, nas)
			// Started before the mounts are made: in its namespace they
			// are plain directories it can rename.
			var tries atomic.Int64
			var tryInWindow atomic.Bool
			a := mounttest.StartAttacker(t, func() error {
				defer tries.Add(1)
				return mounttest.Exchange(vfd, "cache", "nas")
			})
			// The names are put back, and the directories looked at, from
			// a namespace like the attacker's, where neither is a mount
			// point (here both are, and a mount point is not renamed).
			looker := mounttest.StartPrivateNamespace(t)
			// restore gives the NAS's directory its name back and checks
			// that neither directory is left immutable (the attacker
			// paused).
			restore := func(i int) {
				var problem error
				looker.Do(func() {
					fd, err := unix.Open(vols, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
					if err != nil {
						problem = err
						return
					}
					defer unix.Close(fd)
					var st unix.Stat_t
					if err := unix.Fstatat(fd, "cache", &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Ino == nasIno {
						if err := mounttest.Exchange(fd, "cache", "nas"); err != nil {
							problem = fmt.Errorf("putting the NAS's name back: %w", err)
							return
						}
					}
					for _, name := range []string{"cache", "nas"} {
						if immutable, err := isImmutableAt(fd, name); err != nil || immutable {
							problem = errors.Join(problem, fmt.Errorf("%s left immutable (%v)", name, err))
						}
					}
				})
				if problem != nil {
					t.Fatalf("iteration %d: %v", i, problem)
				}
			}
			// The attacker runs freely; in every other teardown it also
			// gets at least one try in the window between the last statx
			// and umount2 (the TearDownBeforeUnmount point), which the
			// free race meets only about once in a hundred teardowns.
			var peerErr string
			e.plugin.hook = func(p testhook.Point, _ string) {
				switch {
				case p == testhook.TearDownBeforeUnmount && tryInWindow.Load():
					for n := tries.Load() + 1; tries.Load() < n; {
						runtime.Gosched()
					}
				case p == testhook.TearDownUnmounted && peer != nil:
					// The volume's tmpfs must be gone from the peer too
					// (umount2 propagates to the copies).
					meta, err := readMetadata(e.metaDir(t, "cache"))
					if err != nil || meta == nil || meta.Mount == nil {
						peerErr = fmt.Sprintf("no record of the volume's mount: %v", err)
						return
					}
					peer.Do(func() {
						if n, err := mountsOfSource(meta.Mount.Source); err != nil || n != 0 {
							peerErr = fmt.Sprintf("the volume's tmpfs is still mounted in the Bidirectional peer after its unmount (%d mounts, %v)", n, err)
						}
					})
				}
			}
			t.Cleanup(func() {
				if peerErr != "" {
					t.Error(peerErr)
				}
			})
			mountNAS := func() (uint64, map[string]string) {
				mounttest.Mount(t, "nas:/export", nas, "tmpfs", 0, "size=1m")
				return mounttest.UniqueMountID(t, nas), mounttest.Sentinels(t, nas)
			}
			nasID, want := mountNAS()
			var hits [2]int // free race, a try in the window
			raced := 0
			outcomes, samples := map[string]int{}, map[string]int{}
			for i := range iterations {
				restore(i)
				e.setUp(t, pod, "cache")
				if peer != nil && i == 0 {
					var seen bool
					peer.Do(func() { seen, _ = isMountRootRaw(vol) })
					if !seen {
						t.Fatal("the volume's tmpfs did not reach the peer: the kubelet root is not shared with it")
					}
				}
				before := a.Steps()
				forced := i%2 == 1
				tryInWindow.Store(forced)
				a.Resume()
				err := e.tearDown("cache")
				a.Pause()
				tryInWindow.Store(false)
				if a.Steps() != before {
					raced++
				}
				outcomes[outcome(err)]++
				if err != nil && samples[outcome(err)] < 3 {
					samples[outcome(err)]++
					t.Logf("sample %s: %v", outcome(err), err)
				}
				if p, found := mounttest.MountPointOfUnique(t, nasID); found {
					mounttest.Intact(t, p, want)
					if t.Failed() {
						t.Fatalf("iteration %d: the NAS's data changed (TearDown: %v)", i, err)
					}
				} else {
					if forced {
						hits[1]++
					} else {
						hits[0]++
					}
					if hits[0]+hits[1] <= 3 {
						t.Logf("iteration %d: the NAS was unmounted (TearDown: %v)", i, err)
					}
					restore(i)
					nasID, want = mountNAS()
				}
				if err != nil {
					restore(i)
					if err2 := e.tearDown("cache"); err2 != nil {
						t.Fatalf("iteration %d: TearDown after %v, with the names back and the attacker paused: %v", i, err, err2)
					}
				}
			}
			restore(iterations) // and nothing left immutable after the last one
			t.Logf("%d iterations, %d raced with an exchange; the NAS unmounted by %d of %d teardowns in a free race, by %d of %d with a try in the window; outcomes %v",
				iterations, raced, hits[0], (iterations+1)/2, hits[1], iterations/2, outcomes)
			if hits[0]+hits[1] > 0 {
				t.Errorf("the NAS was unmounted by %d of %d teardowns", hits[0]+hits[1], iterations)
			}
			if raced < iterations/10 {
				t.Errorf("only %d of %d teardowns overlapped an exchange: the race was not exercised", raced, iterations)
			}
		})
	}
}

// TestTearDownRenameInTheLastWindow: between the last statx and umount2
// (the TearDownBeforeUnmount point) a renamer in another mount namespace
// renames the volume directory away and a share's mount point into its
// place. On a kubelet root whose filesystem has the immutable attribute
// (tmpfs here) the volume directory is pinned: the rename fails with
// EPERM, the volume's own tmpfs is unmounted, and the share stays mounted
// with its data. On one without it (ramfs) the rename succeeds and umount2
// takes the share — nothing prevents that there — but the check after it
// finds that the directory uncovered is not the one SetUp mounted on:
// nothing is removed, the share's data and the directory under it stay,
// and the error is Uncertain.
func TestTearDownRenameInTheLastWindow(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, tc := range []struct {
		fstype string
		pinned bool
	}{
		{"tmpfs", true},
		{"ramfs", false},
	} {
		t.Run(tc.fstype+" root", func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "kubelet")
			mounttest.Mount(t, tc.fstype, root, tc.fstype, 0, "")
			share := filepath.Join(base, "share")
			want := mounttest.Sentinels(t, share)
			e := newEnv(t, root, nil)
			pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", SizeLimit: 1 << 20}})
			pod.MemoryLimit = 64 << 20
			vols, vfd := e.volumesDir(t)
			// Started before the mounts are made: in its namespace they
			// are plain directories it can rename.
			renamer := mounttest.StartPrivateNamespace(t)
			vol := e.setUp(t, pod, "cache").Path()
			nas := filepath.Join(vols, "nas")
			mounttest.Bind(t, share, nas)
			t.Cleanup(func() {
				for _, p := range []string{vol, nas, filepath.Join(vols, "moved")} {
					for mounttest.IsMountRoot(t, p) {
						_ = detach(p)
					}
				}
			})
			var renameErr error
			e.plugin.hook = func(p testhook.Point, _ string) {
				if p != testhook.TearDownBeforeUnmount {
					return
				}
				renamer.Do(func() {
					if renameErr = unix.Renameat(vfd, "cache", vfd, "moved"); renameErr == nil {
						renameErr = unix.Renameat(vfd, "nas", vfd, "cache")
					}
				})
			}
			mounttest.Build(t, nas, "file written-on-the-share keep")
			want["written-on-the-share"] = mounttest.Snapshot(t, share)["written-on-the-share"]

			err := e.tearDown("cache")
			mounttest.Intact(t, share, want)
			if tc.pinned {
				if !errors.Is(renameErr, unix.EPERM) {
					t.Errorf("renaming the volume directory away in the window: %v; want EPERM (it is pinned)", renameErr)
				}
				if err != nil {
					t.Fatalf("TearDown = %v; want success", err)
				}
				if !mounttest.IsMountRoot(t, nas) {
					t.Error("the share is no longer mounted")
				}
				mustNotExist(t, vol)
				mustNotExist(t, e.metaDir(t, "cache"))
				return
			}
			if renameErr != nil {
				t.Fatalf("the renames in the window: %v; want them done (ramfs has no immutable attribute)", renameErr)
			}
			if err == nil || volume.KindOf(err) != volume.Uncertain || !strings.Contains(err.Error(), "not the one SetUp mounted on") {
				t.Fatalf("TearDown = %v; want an Uncertain error saying the directory was replaced", err)
			}
			if _, err := os.Stat(vol); err != nil {
				t.Errorf("the directory that was under the share was removed: %v", err)
			}
			if !mounttest.IsMountRoot(t, filepath.Join(vols, "moved")) {
				t.Error("the volume's own tmpfs (renamed away) is no longer mounted")
			}
		})
	}
}

// TestTearDownLeftoverPin: a teardown stopped while the volume directory
// was pinned — before umount2, or after it and before the pin went —
// leaves it immutable; the next TearDown finishes the job and removes it.
func TestTearDownLeftoverPin(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, tc := range []struct {
		name    string
		mounted bool
	}{
		{"before the unmount", true},
		{"after the unmount", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			e := newEnv(t, filepath.Join(base, "kubelet"), nil)
			pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", SizeLimit: 1 << 20}})
			pod.MemoryLimit = 64 << 20
			vol := e.setUp(t, pod, "cache").Path()
			if !tc.mounted {
				mounttest.Unmount(t, vol)
			}
			pinLikeTearDown(t, e)
			if err := e.tearDown("cache"); err != nil {
				t.Fatalf("TearDown = %v; want success", err)
			}
			mustNotExist(t, vol)
			mustNotExist(t, e.metaDir(t, "cache"))
		})
	}
}

// pinLikeTearDown makes the volume directory "cache" immutable as a
// stopped TearDown leaves it: through a non-recursive clone of the volumes
// directory's mount, which shows the directory beneath the volume's mount
// when that is still there.
func pinLikeTearDown(t *testing.T, e *env) {
	t.Helper()
	_, vfd := e.volumesDir(t)
	setImmutable := func(on bool) error {
		clone, err := unix.OpenTree(vfd, "", unix.OPEN_TREE_CLONE|unix.O_CLOEXEC|unix.AT_EMPTY_PATH)
		if err != nil {
			return err
		}
		defer unix.Close(clone)
		fd, err := unix.Openat(clone, "cache", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
		if err != nil {
			return err
		}
		if on {
			flags |= fsImmutableFL
		} else {
			flags &^= fsImmutableFL
		}
		return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags))
	}
	if err := setImmutable(true); err != nil {
		mounttest.Skip(t, "cannot make the volume directory immutable here: %v", err)
	}
	t.Cleanup(func() { _ = setImmutable(false) })
}

// inodeOf is path's inode number (a symlink not followed).
func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// isImmutableAt reports whether the directory name in dirfd carries
// FS_IMMUTABLE_FL; a missing name does not.
func isImmutableAt(dirfd int, name string) (bool, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	return flags&fsImmutableFL != 0, err
}

// mountsOfSource counts the tmpfs mounts with source in the calling
// thread's mount namespace, for code that runs off the test's goroutine.
func mountsOfSource(source string) (int, error) {
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return 0, err
	}
	return strings.Count(string(b), " - tmpfs "+source+" "), nil
}

// isMountRootRaw reports whether path (not followed) is a mount root, for
// code that runs off the test's goroutine (a NamespaceThread's), where
// t.Fatal must not be called.
func isMountRootRaw(path string) (bool, error) {
	var sx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &sx)
	if err == unix.ENOENT {
		return false, nil
	}
	return sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, err
}
