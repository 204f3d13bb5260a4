package mountdetect

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/base/testhook"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestRemoveAllTestHook: the hook is called once per entry removed, the
// start directory last, each after the entry is gone, with every strategy
// and worker count; RemoveAllAt names entries as its path argument does.
func TestRemoveAllTestHook(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		for _, at := range []bool{false, true} {
			base := t.TempDir()
			dir := filepath.Join(base, "vol")
			mounttest.Build(t, dir, "file a x", "file b/c y", "dir b/d/e", "symlink b/l /etc", "file f/g/h z")
			want := []string{dir}
			filepath.WalkDir(dir, func(p string, _ os.DirEntry, _ error) error {
				if p != dir {
					want = append(want, p)
				}
				return nil
			})
			var mu sync.Mutex
			var got []string
			hook := testhook.Hook(func(p testhook.Point, path string) {
				if p != testhook.RemoveAllRemoved {
					t.Errorf("hook called at %q; want %q", p, testhook.RemoveAllRemoved)
				}
				if _, err := os.Lstat(path); !os.IsNotExist(err) {
					t.Errorf("hook called for %s, which is still there (%v)", path, err)
				}
				mu.Lock()
				got = append(got, path)
				mu.Unlock()
			})
			opts := append(v.opts(), withTestHook(hook))
			var err error
			if at {
				var pfd int
				pfd, err = fsat.Openat(unix.AT_FDCWD, base, unix.O_RDONLY|unix.O_DIRECTORY, 0)
				if err != nil {
					t.Fatal(err)
				}
				err = RemoveAllAt(pfd, "vol", dir, opts...)
				unix.Close(pfd)
			} else {
				err = RemoveAll(dir, opts...)
			}
			if err != nil {
				t.Fatalf("RemoveAll(%q) = %v", dir, err)
			}
			if len(got) == 0 || got[len(got)-1] != dir {
				t.Errorf("RemoveAll (at=%v) reported %v; want the start directory last", at, got)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("RemoveAll (at=%v) reported %v; want each entry once: %v", at, got, want)
			}
		}
	})
}
