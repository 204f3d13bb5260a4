package emptydir

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/mounttest"
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
