package mounttest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// LinkedFiles makes n files of size bytes under dir (which must exist),
// each with a second hard link beside it ("f<i>" and "l<i>"), in
// subdirectories d000, d001, ... of 5,000 files each, through directory
// fds: fast enough for a million.
func LinkedFiles(tb testing.TB, dir string, n, size int) {
	tb.Helper()
	data := []byte(strings.Repeat("x", size))
	const perDir = 5000
	for d := 0; d*perDir < n; d++ {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", d))
		if err := os.Mkdir(sub, 0o755); err != nil {
			tb.Fatal(err)
		}
		dfd, err := unix.Open(sub, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			tb.Fatal(err)
		}
		for i := d * perDir; i < min(n, (d+1)*perDir); i++ {
			name := fmt.Sprintf("f%d", i)
			fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
			if err == nil && size > 0 {
				_, err = unix.Write(fd, data)
			}
			if fd >= 0 {
				unix.Close(fd)
			}
			if err == nil {
				err = unix.Linkat(dfd, name, dfd, fmt.Sprintf("l%d", i), 0)
			}
			if err != nil {
				unix.Close(dfd)
				tb.Fatalf("%s/%s: %v", sub, name, err)
			}
		}
		unix.Close(dfd)
	}
}
