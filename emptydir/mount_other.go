//go:build !linux

package emptydir

import "github.com/nodevol/nodevol/mountdetect"

type osMounter struct{}

func (osMounter) Mount(source, target, fstype string, options []string) error {
	return mountdetect.ErrUnsupported
}

func (osMounter) Unmount(target string) error { return mountdetect.ErrUnsupported }

func kernelSupportsNoswap() bool { return false }
