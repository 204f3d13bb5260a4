package volume

import (
	"strings"
	"testing"
)

func TestValidLockOwner(t *testing.T) {
	for _, owner := range []string{"a", "9", LockVolumeManager, LockCSIDriver("a.example.com"), "A-b.C-9", strings.Repeat("a", 100)} {
		if !validLockOwner(owner) {
			t.Errorf("validLockOwner(%q) = false; want true", owner)
		}
	}
	for _, owner := range []string{"", ".", "-a", ".lock", "../x", "a/b", "a b", "x\x00y", "é", "a_b", strings.Repeat("a", 101)} {
		if validLockOwner(owner) {
			t.Errorf("validLockOwner(%q) = true; want false", owner)
		}
	}
}
