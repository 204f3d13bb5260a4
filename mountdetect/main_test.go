package mountdetect

import (
	"testing"

	"github.com/nodevol/nodevol/internal/mounttest"
)

func TestMain(m *testing.M) { mounttest.Main(m) }

// requireMounts is mounttest.RequireMounts (which fails under CI=true).
func requireMounts(t testing.TB) { mounttest.RequireMounts(t) }
