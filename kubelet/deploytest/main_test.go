package deploytest

import (
	"testing"

	"github.com/nodevol/nodevol/internal/mounttest"
)

// The privilege test mounts: every test of the package runs in a private
// mount namespace when it can (as root), so a failed test leaks no mount.
func TestMain(m *testing.M) { mounttest.Main(m) }
