package mountdetect

// Removal of directories the caller may not list, with mounts beneath them
// and an attacker swapping mounts and symlinks in (run as uid 65534 through
// asNobody).

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

func init() {
	nobodyScenarios["unreadableSwapRace"] = unreadableSwapRaceScenario
	nobodyScenarios["unreadableMountBeneath"] = unreadableMountBeneathScenario
}

// TestRemoveAllUnreadableSwapRace races the path that removes an empty
// directory the caller may not list (openat EACCES, then an O_PATH open
// with the mount checks, then rmdir by name). While a caller without root
// removes vol (holding vol/d, mode 000, empty) thousands of times, a root
// attacker in another mount namespace keeps exchanging vol/d with a tmpfs
// mount point (mode 0333, holding an empty mode-000 directory e and a
// file) and with a symlink to an outside directory of the same shape: at
// every moment between the EACCES, the O_PATH open and the rmdir, vol/d
// may be the mount or the symlink. rmdir goes by name, but only ever
// removes an empty, unmounted entry of vol itself: the mount stays
// mounted, and e and the files in the mount and in the symlink's target
// (what a walk that crossed or followed would remove) are intact byte for
// byte.
func TestRemoveAllUnreadableSwapRace(t *testing.T) {
	mounttest.RequireMounts(t)
	var (
		attacker *mounttest.Attacker
		outside  string
		mnt      string
		target   string
		vol      string
		mntSnap  map[string]string
		tgtSnap  map[string]string
	)
	asNobody(t, "unreadableSwapRace", func(work string) {
		vol = filepath.Join(work, "vol")
		outside = filepath.Join(filepath.Dir(work), "outside")
		mnt = filepath.Join(outside, "m")
		target = filepath.Join(outside, "target")
		sym := filepath.Join(outside, "s")
		mounttest.Build(t, outside, "dir m", "file target/f precious", "dir target/e")
		for _, p := range []string{target, filepath.Join(target, "e")} {
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
		os.Chmod(filepath.Join(target, "e"), 0)
		os.Chmod(target, 0o333)
		os.Chmod(outside, 0o777)
		d := filepath.Join(vol, "d")
		attacker = mounttest.StartAttacker(t, func() error {
			// Swap vol/d with the mount point, and back.
			if err := unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, mnt, unix.RENAME_EXCHANGE); err == nil {
				unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, mnt, unix.RENAME_EXCHANGE)
			}
			// Swap vol/d with a symlink to target, and back.
			if fi, err := os.Lstat(sym); err == nil && fi.IsDir() {
				os.Remove(sym) // the empty d left here when the symlink in vol was unlinked
			}
			os.Symlink(target, sym)
			if err := unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, sym, unix.RENAME_EXCHANGE); err != nil {
				return err
			}
			unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, sym, unix.RENAME_EXCHANGE)
			return nil
		})
		// Mounted after the attacker started: a mount point here, a plain
		// directory (which it may rename) in the attacker's namespace.
		mounttest.Tmpfs(t, mnt, "mode=0333")
		mounttest.Build(t, mnt, "file f precious", "dir e")
		for _, p := range []string{mnt, filepath.Join(mnt, "e"), filepath.Join(mnt, "f")} {
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
		os.Chmod(filepath.Join(mnt, "e"), 0)
		os.Chmod(mnt, 0o333)
		mntSnap = mounttest.Snapshot(t, mnt)
		tgtSnap = mounttest.Snapshot(t, target)
		attacker.Resume()
	})
	attacker.Pause()
	t.Logf("attacker steps: %d", attacker.Steps())
	// Wherever the mount ended up (outside/m or vol/d), it is mounted and
	// intact.
	var found bool
	for _, p := range []string{mnt, filepath.Join(vol, "d")} {
		if mounttest.IsMountRoot(t, p) {
			found = true
			mounttest.Intact(t, p, mntSnap)
		}
	}
	if !found {
		t.Errorf("the tmpfs is mounted neither on %s nor on %s/d", mnt, vol)
	}
	mounttest.Intact(t, target, tgtSnap)
}

func unreadableSwapRaceScenario(t *testing.T, work string) {
	vol := filepath.Join(work, "vol")
	d := filepath.Join(vol, "d")
	vs := variants(t)
	counts := map[string]int{}
	for i := range 3000 {
		v := vs[i%len(vs)]
		os.Mkdir(vol, 0o777)
		if err := os.Mkdir(d, 0); err == nil || errors.Is(err, fs.ErrExist) {
			os.WriteFile(filepath.Join(vol, "f"), nil, 0o644)
		}
		// Odd iterations start at vol/d itself: the start directory the
		// caller may not list (removeDenied), raced the same way.
		start := vol
		if i%2 == 1 {
			start = d
		}
		err := RemoveAll(start, v.opts()...)
		var cm *CrossesMountError
		var pe *os.PathError
		switch {
		case err == nil:
			counts["nil start="+filepath.Base(start)]++
		case errors.As(err, &cm):
			counts[fmt.Sprintf("mount start=%s duringWalk=%v", filepath.Base(start), cm.DuringWalk)]++
		case errors.As(err, &pe) && errors.Is(err, fs.ErrPermission):
			counts["EACCES "+pe.Op]++
		case errors.As(err, &pe) && pe.Op == "unlinkat" && errors.Is(err, unix.EISDIR):
			// A symlink met at vol/d (openat ELOOP) was a directory again
			// when unlinked: the attacker swapped it back. Reported, kept.
			counts["EISDIR unlinkat"]++
		default:
			t.Errorf("%s: RemoveAll = %v; want nil, a mount, or EACCES", v, err)
		}
	}
	t.Logf("outcomes: %v", counts)
}

// TestRemoveAllUnreadableMountBeneath: a mount beneath a directory the
// caller may not list (mode 000, so it cannot even look inside) is still
// refused before anything is touched, by the start directory and by the
// walk: the mount table says so, and the tree stays whole.
func TestRemoveAllUnreadableMountBeneath(t *testing.T) {
	mounttest.RequireMounts(t)
	asNobody(t, "unreadableMountBeneath", func(work string) {
		mounttest.Build(t, work, "dir start/m", "dir vol/u/m", "file vol/f f")
		for _, p := range []string{"start/m", "vol/u/m"} {
			mounttest.Tmpfs(t, filepath.Join(work, p), "mode=0777")
			mounttest.Build(t, filepath.Join(work, p), "file keep precious")
			os.Chown(filepath.Join(work, p, "keep"), 65534, 65534)
		}
		for _, p := range []string{"start", "vol", "vol/u", "vol/f"} {
			if err := os.Chown(filepath.Join(work, p), 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
		os.Chmod(filepath.Join(work, "start"), 0)
		os.Chmod(filepath.Join(work, "vol/u"), 0)
	})
}

func unreadableMountBeneathScenario(t *testing.T, work string) {
	for _, v := range variants(t) {
		for _, p := range []string{"start", "vol"} {
			err := RemoveAll(filepath.Join(work, p), v.opts()...)
			var cm *CrossesMountError
			if !errors.As(err, &cm) || cm.DuringWalk {
				t.Errorf("%s: RemoveAll(%s) = %v; want a *CrossesMountError before the walk", v, p, err)
			}
		}
		if _, err := os.Lstat(filepath.Join(work, "vol/f")); err != nil {
			t.Errorf("%s: vol/f: %v; want it kept (refused before touching)", v, err)
		}
	}
}
