//go:build !linux

package emptydir

import "github.com/nodevol/nodevol/mountdetect"

type osMounter struct{}

func (osMounter) Mount(source, target, fstype string, options []string) error {
	return mountdetect.ErrUnsupported
}

func (osMounter) Unmount(target string) error { return mountdetect.ErrUnsupported }

func kernelSupportsNoswap() bool { return false }

func statfsUsage(string) (int64, int64, error) { return 0, 0, mountdetect.ErrUnsupported }
