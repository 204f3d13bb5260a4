//go:build !linux

package cli

import (
	"time"

	"k8s.io/utils/clock"
)

// newServeScan is scanRoot elsewhere than Linux (where it fails).
func newServeScan(clock.PassiveClock, time.Duration, time.Duration) func(string) (*scanReport, error) {
	return scanRoot
}
