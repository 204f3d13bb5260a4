package monitoring

import (
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// Every test runs in a private mount namespace when it can (as root), so
// a failed test leaks no mount, nor a process of the agent or the driver
// holding one.
func TestMain(m *testing.M) {
	mounttest.Main(m)
}
