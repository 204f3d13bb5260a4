// Package checkout is what the build commands (hack/image, hack/release)
// know of the repository they run in: the root module's path, where its
// source is published, and the directory of the checkout.
package checkout

import (
	"fmt"
	"os/exec"
	"strings"
)

const (
	// ModulePath is the root module's path (go.mod).
	ModulePath = "github.com/nodevol/nodevol"
	// Source is where the source is published: images' and SBOMs'
	// source.
	Source = "https://github.com/nodevol/nodevol"
)

// Root is the root module's directory, as the go command goCmd ("go", or
// a path to one) finds it from the working directory. It is an error to
// run elsewhere, in the kubelet/ or csi/ module included.
func Root(goCmd string) (string, error) {
	out, err := exec.Command(goCmd, "list", "-m", "-f", "{{.Path}} {{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m (run in a checkout of %s): %w", ModulePath, err)
	}
	path, dir, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if path != ModulePath || dir == "" {
		return "", fmt.Errorf("the main module is %q: run in a checkout of %s (not the kubelet/ or csi/ module)", path, ModulePath)
	}
	return dir, nil
}
