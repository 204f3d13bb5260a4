//go:build !linux

package mountdetect

func diskUsage(string, strategy) (Usage, error) { return Usage{}, ErrUnsupported }
