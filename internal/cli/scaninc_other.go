//go:build !linux

package cli

import (
	"time"

	"k8s.io/utils/clock"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/volume"
)

// newServeScan is scanRoot elsewhere than Linux (where it fails).
func newServeScan(_ clock.PassiveClock, _, _ time.Duration, opts ...emptydir.Option) func(string) (*scanReport, error) {
	return func(root string) (*scanReport, error) {
		return scanRootWithin(root, volume.DefaultScanLimits(), opts...)
	}
}
