package reconciler

import (
	"testing"

	"github.com/nodevol/nodevol/internal/mounttest"
)

func TestMain(m *testing.M) { mounttest.Main(m) }
