package emptydir

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// Reproduce (as root for the ext4 rows):
//
//	go test -run '^$' -bench TearDown -benchtime 3x ./emptydir
func BenchmarkTearDown(b *testing.B) {
	const dirs, files = 100, 1000 // 100,000 files
	fss := map[string]string{"tmpfs": mounttest.MemTempDir(b)}
	if os.Geteuid() == 0 && mounttest.InPrivateNamespace() {
		fss["ext4-loop"] = mounttest.LoopFS(b, "ext4", 4<<30, "", "-q", "-F")
	}
	populate := func(b *testing.B, dir string) {
		for d := range dirs {
			sub := filepath.Join(dir, fmt.Sprintf("d%03d", d))
			if err := os.MkdirAll(sub, 0o755); err != nil {
				b.Fatal(err)
			}
			fd, err := unix.Open(sub, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			for f := range files {
				ffd, err := unix.Openat(fd, fmt.Sprintf("f%04d", f), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
				if err != nil {
					b.Fatal(err)
				}
				unix.Close(ffd)
			}
			unix.Close(fd)
		}
		unix.Sync()
	}
	for fsName, base := range fss {
		b.Run(fsName+"/emptydir.TearDown", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				l, _ := volume.NewLayout(filepath.Join(base, fmt.Sprintf("kubelet-%d", i)))
				p := New(volume.NewHost(l, nil, 0))
				pod := &volume.Pod{UID: "u", Volumes: []volume.Spec{{Name: "cache", EmptyDir: &volume.EmptyDirSource{}}}}
				m, err := p.NewMounter(&pod.Volumes[0], pod)
				if err != nil {
					b.Fatal(err)
				}
				if err := m.SetUp(context.Background(), volume.MounterArgs{}); err != nil {
					b.Fatal(err)
				}
				populate(b, m.Path())
				u, _ := p.NewUnmounter("cache", "u")
				b.StartTimer()
				if err := u.TearDown(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fsName+"/os.RemoveAll", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				dir := filepath.Join(base, fmt.Sprintf("plain-%d", i))
				populate(b, dir)
				b.StartTimer()
				if err := os.RemoveAll(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Reproduce (as root):
//
//	go test -run '^$' -bench MemoryTearDown ./emptydir
//
// The teardown of an empty Memory volume, whose directory is pinned for
// the unmount where the kubelet root's filesystem has the immutable
// attribute (tmpfs) and is not where it has none (ramfs: the same
// teardown without the pin), against what upstream's does: umount2 by
// path and os.RemoveAll.
func BenchmarkMemoryTearDown(b *testing.B) {
	if os.Geteuid() != 0 || !mounttest.InPrivateNamespace() {
		b.Skip("skipping: needs root in the private mount namespace TestMain makes")
	}
	ctx := klog.NewContext(context.Background(), logr.Discard())
	for _, fstype := range []string{"tmpfs", "ramfs"} {
		root := filepath.Join(b.TempDir(), fstype)
		mounttest.Mount(b, fstype, root, fstype, 0, "")
		b.Run(fstype+" root/emptydir.TearDown", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				l, _ := volume.NewLayout(filepath.Join(root, fmt.Sprintf("kubelet-%d", i)))
				p := New(volume.NewHost(l, nil, 1<<30))
				pod := &volume.Pod{UID: "u", MemoryLimit: 64 << 20, Volumes: []volume.Spec{{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: volume.StorageMediumMemory}}}}
				m, err := p.NewMounter(&pod.Volumes[0], pod)
				if err != nil {
					b.Fatal(err)
				}
				if err := m.SetUp(ctx, volume.MounterArgs{}); err != nil {
					b.Fatal(err)
				}
				u, _ := p.NewUnmounter("cache", "u")
				b.StartTimer()
				if err := u.TearDown(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("tmpfs root/pin+release", func(b *testing.B) {
		l, _ := volume.NewLayout(filepath.Join(b.TempDir(), "kubelet"))
		mounttest.Tmpfs(b, l.Root(), "")
		p := New(volume.NewHost(l, nil, 1<<30))
		pod := &volume.Pod{UID: "u", MemoryLimit: 64 << 20, Volumes: []volume.Spec{{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: volume.StorageMediumMemory}}}}
		m, err := p.NewMounter(&pod.Volumes[0], pod)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.SetUp(ctx, volume.MounterArgs{}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = detach(m.Path()) })
		v, err := p.openVolume(ordinaryRef("u", "cache"), false)
		if err != nil {
			b.Fatal(err)
		}
		defer v.Close()
		meta, err := v.readMeta()
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			pinned, err := v.pinMountpoint(meta.Mount)
			if err != nil {
				b.Fatal(err)
			}
			if err := pinned.release(); err != nil {
				b.Fatal(err)
			}
		}
	})
	root := filepath.Join(b.TempDir(), "plain")
	mounttest.Tmpfs(b, root, "")
	b.Run("tmpfs root/umount2+os.RemoveAll", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			dir := filepath.Join(root, fmt.Sprintf("cache-%d", i))
			if err := os.Mkdir(dir, 0o750); err != nil {
				b.Fatal(err)
			}
			if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64m"); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := unix.Unmount(dir, 0); err != nil {
				b.Fatal(err)
			}
			if err := os.RemoveAll(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
}
