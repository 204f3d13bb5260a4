package mountdetect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// liarFUSE mounts on target a FUSE filesystem served by a goroutine: its
// root holds a directory x (node 4) holding a directory d (node 2), which
// holds one file, keep (node 3); d is also reachable as the root's entry
// d. Nothing ever goes away; but READDIR of d answers ENOENT, the error
// the kernel gives for a removed directory. Whatever else is asked is
// answered ENOSYS (changes: EPERM, RMDIR: ENOTEMPTY). The clean-up unmounts,
// closes the connection and waits for the server.
func liarFUSE(t *testing.T, target string) {
	t.Helper()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		mounttest.Skip(t, "no /dev/fuse: %v", err)
	}
	mounttest.Mount(t, "liar", target, "fuse", 0, fmt.Sprintf("fd=%d,rootmode=040755,user_id=0,group_id=0", fd))
	var wg sync.WaitGroup
	t.Cleanup(func() {
		unix.Unmount(target, unix.MNT_DETACH)
		unix.Close(fd)
		wg.Wait()
	})
	le := binary.LittleEndian
	attr := func(b []byte, ino uint64) {
		le.PutUint64(b[0:], ino)
		mode, nlink := uint32(unix.S_IFDIR|0o755), uint32(2)
		if ino == 3 {
			mode, nlink = unix.S_IFREG|0o644, 1
			le.PutUint64(b[8:], 8) // size
		}
		le.PutUint32(b[60:], mode)
		le.PutUint32(b[64:], nlink)
		le.PutUint32(b[80:], 4096) // blksize
	}
	wg.Go(func() {
		buf := make([]byte, 1<<20+4096)
		for {
			n, err := unix.Read(fd, buf)
			if err != nil {
				if err == unix.EINTR || err == unix.ENOENT {
					continue
				}
				return // ENODEV: unmounted; EBADF: closed
			}
			if n < 40 {
				continue
			}
			op, unique, node := le.Uint32(buf[4:]), le.Uint64(buf[8:]), le.Uint64(buf[16:])
			in := buf[40:n]
			var out []byte
			errno := int32(0)
			switch op {
			case 26: // INIT
				out = make([]byte, 64)
				le.PutUint32(out[0:], 7)
				le.PutUint32(out[4:], 31)
				le.PutUint32(out[16:], 1<<16) // max_write
			case 1: // LOOKUP
				name := string(in[:len(in)-1])
				var ino uint64
				switch {
				case (node == 1 || node == 4) && name == "d":
					ino = 2
				case node == 1 && name == "x":
					ino = 4
				case node == 2 && name == "keep":
					ino = 3
				default:
					errno = -int32(unix.ENOENT)
				}
				if ino != 0 {
					out = make([]byte, 128)
					le.PutUint64(out[0:], ino)
					attr(out[40:], ino)
				}
			case 3: // GETATTR
				out = make([]byte, 104)
				attr(out[16:], node)
			case 27, 14: // OPENDIR, OPEN
				out = make([]byte, 16)
			case 29, 18, 25: // RELEASEDIR, RELEASE, FLUSH
			case 28: // READDIR
				switch {
				case node == 2:
					errno = -int32(unix.ENOENT) // the lie
				case node == 4 && le.Uint64(in[8:]) == 0:
					// x: ".", "..", "d" (fuse_dirent: ino, off, namelen, type, name padded to 8)
					for i, e := range []struct {
						ino  uint64
						name string
					}{{4, "."}, {1, ".."}, {2, "d"}} {
						rec := make([]byte, 24+(len(e.name)+7)/8*8)
						le.PutUint64(rec[0:], e.ino)
						le.PutUint64(rec[8:], uint64(i+1))
						le.PutUint32(rec[16:], uint32(len(e.name)))
						le.PutUint32(rec[20:], unix.DT_DIR)
						copy(rec[24:], e.name)
						out = append(out, rec...)
					}
				default:
					out = []byte{} // the end
				}
			case 2, 42: // FORGET, BATCH_FORGET: no reply
				continue
			case 11: // RMDIR
				errno = -int32(unix.ENOTEMPTY)
			case 10, 22, 34, 4: // UNLINK, RENAME, ..., SETATTR
				errno = -int32(unix.EPERM)
			default:
				errno = -int32(unix.ENOSYS)
			}
			if errno != 0 {
				out = nil
			}
			reply := make([]byte, 16+len(out))
			le.PutUint32(reply[0:], uint32(len(reply)))
			le.PutUint32(reply[4:], uint32(errno))
			le.PutUint64(reply[8:], unique)
			copy(reply[16:], out)
			unix.Write(fd, reply)
		}
	})
}

// TestRemoveAllListingENOENTOfLiveDir: getdents64 ENOENT is what the
// kernel answers for a directory removed since it was opened, but a
// filesystem may answer it for a directory that is still there (a FUSE
// daemon, here). Such a directory is not gone: it still stands at its
// name, with its contents, and RemoveAll must not report success.
func TestRemoveAllListingENOENTOfLiveDir(t *testing.T) {
	mounttest.RequireMounts(t)
	mnt := filepath.Join(t.TempDir(), "fuse")
	liarFUSE(t, mnt)
	d := filepath.Join(mnt, "d")
	if _, err := os.Lstat(filepath.Join(d, "keep")); err != nil {
		t.Fatalf("FUSE server: %v", err)
	}
	for _, v := range variants(t) {
		err := mounttest.Within(t, 10e9, "RemoveAll", func() error { return RemoveAll(d, v.opts()...) })
		var pe *os.PathError
		if err == nil {
			t.Errorf("%s: RemoveAll(%s) = nil, but it still exists with its contents", v, d)
		} else if !errors.As(err, &pe) || pe.Op != "getdents64" || pe.Path != d || !errors.Is(err, unix.ENOENT) {
			t.Errorf("%s: RemoveAll = %v; want the *os.PathError of getdents64, ENOENT, naming %s", v, err, d)
		}
		if _, err := os.Lstat(d); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		// Met in the walk: the one failure is d's listing (x, not empty
		// because of it, is not reported again).
		x := filepath.Join(mnt, "x")
		err = mounttest.Within(t, 10e9, "RemoveAll", func() error { return RemoveAll(x, v.opts()...) })
		if !errors.As(err, &pe) || pe.Op != "getdents64" || pe.Path != filepath.Join(x, "d") || !errors.Is(err, unix.ENOENT) {
			t.Errorf("%s: RemoveAll(%s) = %v; want the *os.PathError of getdents64, ENOENT, naming %s/d", v, x, err, x)
		}
	}
}
