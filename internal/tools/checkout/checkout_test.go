package checkout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRoot(t *testing.T) {
	dir, err := Root("go")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(string(mod), "\n"); first != "module "+ModulePath {
		t.Errorf("Root = %s, whose go.mod begins %q; want module %s", dir, first, ModulePath)
	}
	// The kubelet/ module is in the checkout, but it is not the root
	// module: the build commands' paths would be wrong from there.
	t.Chdir(filepath.Join(dir, "kubelet"))
	if got, err := Root("go"); err == nil {
		t.Errorf("Root in kubelet/ = %s; want an error", got)
	}
}
