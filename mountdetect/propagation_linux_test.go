package mountdetect

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// PropagationOf against real mounts: a private tmpfs, a shared one and a
// bind of it (its peer), a slave of it (HostToContainer's kind: a mount
// made under the master appears under the slave), and an unbindable one.
func TestPropagationOf(t *testing.T) {
	mounttest.RequireMounts(t)
	dir := t.TempDir()
	master, peer, slave, private, unbindable := filepath.Join(dir, "master"), filepath.Join(dir, "peer"),
		filepath.Join(dir, "slave"), filepath.Join(dir, "private"), filepath.Join(dir, "unbindable")
	mounttest.Tmpfs(t, master, "size=1m")
	mount := func(target string, flags uintptr) {
		t.Helper()
		if err := unix.Mount("", target, "", flags, ""); err != nil {
			t.Fatalf("mount --make-* %s: %v", target, err)
		}
	}
	mount(master, unix.MS_SHARED)
	mounttest.Bind(t, master, peer)
	mounttest.Bind(t, master, slave)
	mount(slave, unix.MS_SLAVE)
	mounttest.Tmpfs(t, private, "size=1m")
	mount(private, unix.MS_PRIVATE)
	mounttest.Tmpfs(t, unbindable, "size=1m")
	mount(unbindable, unix.MS_UNBINDABLE)

	of := func(path string) Propagation {
		t.Helper()
		p, err := PropagationOf(path)
		if err != nil {
			t.Fatalf("PropagationOf(%s): %v", path, err)
		}
		return p
	}
	m := of(master)
	if m.PeerGroup == 0 || m.Master != 0 || !m.Receives() || m.MountPoint != master {
		t.Errorf("master: %+v; want shared, mount point %s", m, master)
	}
	if p := of(peer); p.PeerGroup != m.PeerGroup || p.Master != 0 {
		t.Errorf("peer: %+v; want shared:%d like its master", p, m.PeerGroup)
	}
	s := of(slave)
	if s.PeerGroup != 0 || s.Master != m.PeerGroup || !s.Receives() {
		t.Errorf("slave: %+v (%s); want slave (master:%d)", s, s, m.PeerGroup)
	}
	// A directory below the mount point answers for the mount holding it.
	if err := os.Mkdir(filepath.Join(slave, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p := of(filepath.Join(slave, "sub")); p != s {
		t.Errorf("a directory in the slave: %+v; want the slave's %+v", p, s)
	}
	// What Receives promises: a mount made under the master appears under
	// the slave.
	mounttest.Tmpfs(t, filepath.Join(master, "sub"), "size=1m")
	if ok, _, err := IsMountPoint(filepath.Join(slave, "sub")); err != nil || !ok {
		t.Errorf("a mount made under the master: under the slave IsMountPoint = %v, %v; want true", ok, err)
	}
	if p := of(private); p.Receives() || p.String() != "private" {
		t.Errorf("private: %+v (%s); want private", p, p)
	}
	if p := of(unbindable); p.Receives() || p.String() != "unbindable" {
		t.Errorf("unbindable: %+v (%s); want unbindable", p, p)
	}
	if _, err := PropagationOf(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("PropagationOf(missing) = %v; want ErrNotExist", err)
	}
}

// statmount (6.8+) and the mount table say the same, for each kind.
func TestPropagationOfStatmountMatchesMountinfo(t *testing.T) {
	mounttest.RequireMounts(t)
	dir := t.TempDir()
	shared, slave := filepath.Join(dir, "shared"), filepath.Join(dir, "slave")
	mounttest.Tmpfs(t, shared, "size=1m")
	if err := unix.Mount("", shared, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	mounttest.Bind(t, shared, slave)
	if err := unix.Mount("", slave, "", unix.MS_SLAVE, ""); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{shared, slave, dir, "/"} {
		var sx unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_MNT_ID_UNIQUE, &sx); err != nil || sx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
			mounttest.Skip(t, "skipping: no STATX_MNT_ID_UNIQUE (Linux 6.8): %v", err)
		}
		got, err := statmountPropagation(sx.Mnt_id)
		if errors.Is(err, ErrUnsupported) {
			mounttest.Skip(t, "skipping: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_MNT_ID, &sx); err != nil {
			t.Fatal(err)
		}
		infos, err := mountinfo.GetMounts(func(i *mountinfo.Info) (bool, bool) { return i.ID != int(sx.Mnt_id), false })
		if err != nil || len(infos) != 1 {
			t.Fatalf("mount %d in mountinfo: %v, %d entries", sx.Mnt_id, err, len(infos))
		}
		want, err := parsePropagation(infos[0].Optional)
		if err != nil {
			t.Fatal(err)
		}
		want.MountPoint, want.ID = infos[0].Mountpoint, infos[0].ID
		if got != want {
			t.Errorf("%s: statmount says %+v; mountinfo %+v", path, got, want)
		}
	}
}
