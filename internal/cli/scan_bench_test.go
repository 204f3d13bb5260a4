//go:build linux

package cli

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/mounttest"
)

// Reproduce (as root, for the 1,000 extra mounts):
//
//	go test -run '^$' -bench Scan -benchtime 5x ./cmd/nodevol

// scanFixture makes a kubelet root with pods×vols emptyDir volume
// directories and, as root, adds extra tmpfs mounts elsewhere in the
// (private) mount namespace so the mount table is large.
func scanFixture(tb testing.TB, pods, vols, extraMounts int) string {
	tb.Helper()
	base := mounttest.MemTempDir(tb)
	root := filepath.Join(base, "kubelet")
	for p := range pods {
		for v := range vols {
			d := filepath.Join(root, "pods", fmt.Sprintf("pod-%05d", p), "volumes/kubernetes.io~empty-dir", fmt.Sprintf("vol%d", v))
			if err := os.MkdirAll(d, 0o755); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if extraMounts > 0 {
		mounttest.ManyMounts(tb, filepath.Join(base, "mounts"), extraMounts)
	}
	return root
}

func BenchmarkScan(b *testing.B) {
	for _, extra := range []int{0, 1000} {
		b.Run(fmt.Sprintf("volumes=10000/mounts=+%d", extra), func(b *testing.B) {
			root := scanFixture(b, 2000, 5, extra)
			for b.Loop() {
				if code := run([]string{"scan", "--json", "--root", root}, io.Discard, io.Discard); code != ExitOK {
					b.Fatalf("scan exit %d", code)
				}
			}
		})
	}
}

// TestScanReadsTheMountTableOnce runs the built binary under strace and
// counts opens of mountinfo: one, whatever the number of volumes. The Go
// runtime reads mountinfo itself at start-up (cgroup-aware GOMAXPROCS), so
// the count is taken against `nodevol help`, which reads no mount table.
func TestScanReadsTheMountTableOnce(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		mounttest.Skip(t, "strace not installed (.ci/run installs it)")
	}
	root := scanFixture(t, 200, 5, 0)
	bin := buildBinary(t)
	opens := func(args ...string) (reads, volumes int) {
		t.Helper()
		cmd := exec.Command(strace, append([]string{"-f", "-qq", "-e", "trace=open,openat,openat2", "-o", "/dev/stdout", bin.path}, args...)...)
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != ExitOK) {
			t.Fatalf("strace nodevol %v: %v", args, err)
		}
		for line := range strings.Lines(string(out)) {
			if strings.Contains(line, "mountinfo\"") {
				reads++
			}
			if strings.Contains(line, `"podUID"`) {
				volumes++
			}
		}
		return reads, volumes
	}
	baseline, _ := opens("help")
	reads, volumes := opens("scan", "--json", "--root", root)
	if volumes != 1000 {
		t.Fatalf("scan reported %d volumes; want 1000", volumes)
	}
	if reads-baseline != 1 {
		t.Errorf("scan opened mountinfo %d times (the runtime alone: %d); want exactly 1 more", reads, baseline)
	}
}
