package reconciler

import (
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

func TestMain(m *testing.M) { mounttest.Main(m) }
