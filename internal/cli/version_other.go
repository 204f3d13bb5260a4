//go:build !linux

package main

// kernelRelease is "" outside Linux: nodevol's kernel features are Linux's.
func kernelRelease() string { return "" }
