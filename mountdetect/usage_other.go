//go:build !linux

package mountdetect

func diskUsage(string, *config) (Usage, error) { return Usage{}, ErrUnsupported }

func diskUsageFile(int, string, *config) (Usage, error) { return Usage{}, ErrUnsupported }
