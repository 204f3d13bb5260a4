//go:build !linux

package privatens

import "errors"

func child(string) bool { return false }

func reexec(string, []string, Streams) (int, error) {
	return 0, errors.New("mount namespaces are Linux-only")
}
