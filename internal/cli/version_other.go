//go:build !linux

package cli

// kernelRelease is "" outside Linux: nodevol's kernel features are Linux's.
func kernelRelease() string { return "" }
