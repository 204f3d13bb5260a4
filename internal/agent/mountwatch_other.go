//go:build !linux

package agent

import (
	"context"

	"github.com/go-logr/logr"
)

// watchMountTable returns a channel that never fires: only Linux says
// when the mount table changes; serve scans at the interval.
func watchMountTable(context.Context, logr.Logger) <-chan struct{} { return nil }
