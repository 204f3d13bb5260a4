package emptydir

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// TestQuotaPathSwap: SetUp and TearDown of a Default volume with a
// quota, again and again, while an attacker who can write in the pod
// directory (or, harder, above it) exchanges one path component between
// the kubelet root and the volume with a symlink to a copy of the rest of
// the path outside the root, whose volume-named directory carries a
// project of its own (a container runtime's, say: recorded in its own
// files, with the inherit flag and a limit). Nothing outside the root ever
// changes: no directory's project ID or inode flags, not the outside
// project's limit, not the sentinel; whenever SetUp succeeds, the volume
// directory itself carries the project its record names; and once the
// attack stops, TearDown leaves no project behind.
//
// On a kernel without quotas (the CI host) the roots are on a loop-mounted
// XFS, whose project IDs are real, with the limits kept by a stand-in; in
// the quota VM (NODEVOL_QUOTA_VM) on its prjquota XFS and ext4, with the
// kernel's own quotas, and fewer rounds (the VM is emulated).
func TestQuotaPathSwap(t *testing.T) {
	base, realQuota := crashFilesystem(t)
	rounds := 500
	if realQuota {
		rounds = 100
	}
	for _, comp := range []string{
		"pods",
		"pods/" + testUID,
		"pods/" + testUID + "/volumes",
		"pods/" + testUID + "/volumes/kubernetes.io~empty-dir",
		"pods/" + testUID + "/volumes/kubernetes.io~empty-dir/cache",
	} {
		t.Run(strings.ReplaceAll(strings.TrimPrefix(comp, "pods/"+testUID), "/", "_"), func(t *testing.T) {
			runQuotaPathSwap(t, base, comp, realQuota, rounds)
		})
	}
}

func runQuotaPathSwap(t *testing.T, base, comp string, realQuota bool, rounds int) {
	work, err := os.MkdirTemp(base, "swap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	root := filepath.Join(work, "kubelet")
	volRel := "pods/" + testUID + "/volumes/kubernetes.io~empty-dir/cache"
	mounttest.Build(t, root, "dir "+filepath.Dir(volRel))

	// The outside copy of the path below comp, on the same filesystem,
	// its volume directory a runtime's project directory with a sentinel.
	outside := filepath.Join(work, "outside")
	victim := filepath.Join(outside, strings.TrimPrefix(volRel, filepath.Dir(comp)+"/"))
	if filepath.Dir(comp) == "." {
		victim = filepath.Join(outside, volRel)
	}
	sentinel := bytes.Repeat([]byte("runtime data "), 100)
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	witness := filepath.Join(work, "runtime-witness") // never reachable by a swap
	if err := os.Mkdir(witness, 0o755); err != nil {
		t.Fatal(err)
	}
	files := t.TempDir()
	kernel := &mounttest.FileQuotaKernel{Path: filepath.Join(files, "limits.json")}
	quotas := func(name string, first uint32) *fsquota.Manager {
		opts := []fsquota.Option{
			fsquota.WithProjectsFile(filepath.Join(files, name+"-projects")),
			fsquota.WithProjidFile(filepath.Join(files, name+"-projid")),
			fsquota.Enforce(), fsquota.WithFirstID(first),
		}
		if !realQuota {
			opts = append(opts, quotaTestKernel(kernel))
		}
		return fsquota.New(opts...)
	}
	runtime := quotas("runtime", 3000000)
	const runtimeLimit = 5 << 20
	witnessFd := openDirFd(t, witness)
	foreign, err := runtime.Assign(witnessFd, witness, runtimeLimit)
	if err != nil {
		t.Fatal(err)
	}
	if err := fsquota.SetProjectID(victim, foreign.ID); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "sentinel"), sentinel, 0o644); err != nil {
		t.Fatal(err)
	}
	// What every outside directory looks like now.
	type attrs struct{ id, flags uint32 }
	look := func(path string) attrs {
		id, err := fsquota.ProjectID(path)
		if err != nil {
			t.Fatalf("ProjectID(%s): %v", path, err)
		}
		return attrs{id, mounttest.FileFlags(t, path)}
	}
	want := map[string]attrs{witness: look(witness)}
	filepath.WalkDir(outside, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		want[p] = look(p)
		return nil
	})
	if a := want[victim]; a.id != foreign.ID || a.flags&mounttest.FlagProjInherit == 0 {
		t.Fatalf("victim %+v; want project %d with the inherit flag", a, foreign.ID)
	}
	checkOutside := func(when string) {
		t.Helper()
		for p, w := range want {
			if got := look(p); got != w {
				t.Fatalf("%s: %s has project %d, flags %#x; it had %d, %#x", when, p, got.id, got.flags, w.id, w.flags)
			}
		}
		if u, err := runtime.Usage(witnessFd, witness); err != nil || u.ProjectID != foreign.ID || u.LimitBytes != runtimeLimit {
			t.Fatalf("%s: the runtime's project = %+v, %v; want project %d with its %d-byte limit", when, u, err, foreign.ID, runtimeLimit)
		}
		if b, err := os.ReadFile(filepath.Join(victim, "sentinel")); err != nil || !bytes.Equal(b, sentinel) {
			t.Fatalf("%s: sentinel = %d bytes, %v; want it intact", when, len(b), err)
		}
	}

	q := quotas("nodevol", fsquota.FirstProjectID)
	e := newEnv(t, root, nil, WithQuotas(q))
	spec := volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{SizeLimit: 1 << 20}}
	pod := e.pod(spec)

	// The attacker exchanges comp with a symlink to its outside copy; a
	// side the code under test removed (a symlink in the volume's place
	// is unlinked by TearDown) is made again as that symlink.
	parent, name := filepath.Join(root, filepath.Dir(comp)), filepath.Base(comp)
	swap, target := name+".swap", filepath.Join(outside, name)
	if filepath.Base(comp) == "cache" {
		target = victim
	}
	if err := os.Symlink(target, filepath.Join(parent, swap)); err != nil {
		t.Fatal(err)
	}
	parentFd := openDirFd(t, parent)
	attacker := mounttest.StartAttacker(t, func() error {
		err := mounttest.Exchange(parentFd, name, swap)
		if errors.Is(err, unix.ENOENT) {
			for _, n := range []string{name, swap} {
				if _, lerr := os.Lstat(filepath.Join(parent, n)); errors.Is(lerr, os.ErrNotExist) {
					_ = unix.Symlinkat(target, parentFd, n)
				}
			}
		}
		return err
	})
	// restore puts comp back in place (the attacker paused): the real
	// directory under its name, the symlink beside it.
	restore := func() {
		t.Helper()
		fi, err := os.Lstat(filepath.Join(parent, name))
		if err == nil && fi.Mode()&os.ModeSymlink != 0 {
			if _, err := os.Lstat(filepath.Join(parent, swap)); err == nil {
				if err := mounttest.Exchange(parentFd, name, swap); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Remove(filepath.Join(parent, name)); err != nil {
				t.Fatal(err)
			}
		}
	}

	setUps, tearDowns := 0, 0
	for i := range rounds {
		m, err := e.plugin.NewMounter(pod.Volume("cache"), pod)
		if err != nil {
			t.Fatal(err)
		}
		attacker.Resume()
		err = m.SetUp(e.ctx, volume.MounterArgs{})
		attacker.Pause()
		checkOutside("after SetUp")
		if err == nil {
			setUps++
			restore()
			// The volume directory itself carries its recorded project.
			md, rerr := readMetadata(e.metaDir(t, "cache"))
			if rerr != nil || md == nil || md.QuotaProjectID == 0 {
				t.Fatalf("round %d: SetUp succeeded with record %+v, %v; want a project", i, md, rerr)
			}
			// (Exchanged with the volume directory itself, the name may
			// hold another directory SetUp made when TearDown had
			// unlinked the symlink: the recorded one is one of the two.)
			found := false
			for _, p := range []string{filepath.Join(root, volRel), filepath.Join(parent, swap)} {
				var st unix.Stat_t
				if err := unix.Lstat(p, &st); err != nil || st.Ino != md.QuotaDirIno || uint64(st.Dev) != md.QuotaDirDev {
					continue
				}
				found = true
				if id, err := fsquota.ProjectID(p); err != nil || id != md.QuotaProjectID {
					t.Fatalf("round %d: the volume directory %s carries project %d, %v; its record names %d", i, p, id, err, md.QuotaProjectID)
				}
			}
			if !found {
				t.Fatalf("round %d: no directory is the recorded inode %d", i, md.QuotaDirIno)
			}
		}
		u, err := e.plugin.NewUnmounter("cache", testUID)
		if err != nil {
			t.Fatal(err)
		}
		attacker.Resume()
		err = u.TearDown(e.ctx)
		attacker.Pause()
		checkOutside("after TearDown")
		if err == nil {
			tearDowns++
		} else if os.Getenv("DEBUGSWAP") != "" {
			t.Logf("round %d: TearDown: %v", i, err)
		}
	}
	t.Logf("%d rounds: %d SetUps and %d TearDowns succeeded; %d exchanges", rounds, setUps, tearDowns, attacker.Steps())
	if attacker.Steps() < int64(rounds) {
		t.Errorf("only %d exchanges in %d rounds: the attack hardly ran", attacker.Steps(), rounds)
	}

	// The attack over: everything is torn down, no project is left.
	restore()
	if err := e.tearDown("cache"); err != nil {
		t.Fatalf("TearDown after the attack: %v", err)
	}
	checkOutside("at the end")
	for _, f := range []string{"nodevol-projects", "nodevol-projid"} {
		if b, err := os.ReadFile(filepath.Join(files, f)); err != nil && !errors.Is(err, os.ErrNotExist) || len(b) != 0 {
			t.Errorf("%s after the last TearDown = %q, %v; want empty", f, b, err)
		}
	}
	if !realQuota {
		limits, err := kernel.Limits()
		if err != nil || len(limits) != 1 || limits[foreign.ID] != runtimeLimit {
			t.Errorf("limits at the end = %v, %v; want only the runtime's", limits, err)
		}
	}
}
