package mountdetect

import (
	"fmt"
	"os"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(benchChildEnv); path != "" {
		os.Exit(benchChild(path))
	}
	mounttest.Main(m)
}

// benchChildEnv names the tree a child process of the test binary removes
// (see TestMain).
const benchChildEnv = "NODEVOL_BENCH_REMOVE"

// benchChild is the child's whole run: RemoveAll(path), exit status 1 with
// the error on failure.
func benchChild(path string) int {
	if err := RemoveAll(path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// requireMounts is mounttest.RequireMounts (which fails under CI=true).
func requireMounts(t testing.TB) { mounttest.RequireMounts(t) }
