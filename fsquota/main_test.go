package fsquota

import (
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestMain runs the tests in a private mount namespace when root, so the
// XFS images they loop-mount never reach the host.
func TestMain(m *testing.M) { mounttest.Main(m) }
