package driver

import (
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestMain runs the tests in a private mount namespace when root, so that
// no mount a test makes (or forgets) reaches the host.
func TestMain(m *testing.M) { mounttest.Main(m) }
