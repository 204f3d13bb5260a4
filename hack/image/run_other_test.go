//go:build !linux

package main

import (
	"testing"

	"github.com/nodevol/nodevol/internal/tools/ociimage"
)

// runsInImage needs chroot and a Linux kernel to run the image's binary.
func runsInImage(t *testing.T, _ *ociimage.Layout) {
	t.Helper()
	t.Log("not running the image's nodevol: that needs Linux")
}
