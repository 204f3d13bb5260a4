//go:build !linux

package emptydir

func kernelSupportsNoswap() bool { return false }
