//go:build !linux

package emptydir

import "github.com/nodevol/nodevol/mountdetect"

func kernelSupportsNoswap() bool { return false }

func mountAPI() (bool, error)    { return false, mountdetect.ErrUnsupported }
func tmpfsNoswap() (bool, error) { return false, mountdetect.ErrUnsupported }
