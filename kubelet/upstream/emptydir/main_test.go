package emptydir

import (
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestMain runs the tests in a private mount namespace when root, so that
// a failing test cannot leave a tmpfs or hugetlbfs mounted on the host.
func TestMain(m *testing.M) { mounttest.Main(m) }
