//go:build !linux

package subpath

import (
	"context"

	"github.com/nodevol/nodevol/mountdetect"
)

func clean(context.Context, string) error { return mountdetect.ErrUnsupported }

func list(string) ([]Entry, error) { return nil, mountdetect.ErrUnsupported }
