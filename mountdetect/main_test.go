package mountdetect

import (
	"os"
	"testing"

	"github.com/nodevol/nodevol/internal/mounttest"
)

func TestMain(m *testing.M) { mounttest.Main(m) }

// requireMounts is mounttest.RequireMounts, except that under CI=true (the
// project's CI runs as root, in a private mount namespace) a test that
// could not mount fails instead of skipping: a guarantee the CI run never
// exercised must not pass as tested.
func requireMounts(t testing.TB) {
	t.Helper()
	if os.Getenv("CI") == "true" && (os.Geteuid() != 0 || !mounttest.InPrivateNamespace()) {
		t.Fatalf("CI=true but this test cannot mount (euid %d, private mount namespace: %v); it needs root", os.Geteuid(), mounttest.InPrivateNamespace())
	}
	mounttest.RequireMounts(t)
}
