package mountdetect_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEGoCompiles builds every Go block of the README as written: each
// is a whole program, compiled as a package of this module (through the go
// command's -overlay, so nothing is written into the checkout), so the
// README cannot show an API that does not exist or a call that does not
// compile.
func TestREADMEGoCompiles(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?ms)^```go\n(.*?)^```$").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block")
	}
	for i, b := range blocks {
		src := b[1]
		if !strings.HasPrefix(src, "package ") {
			t.Errorf("README.md's Go block %d does not begin with a package clause: write it as a whole program, so that it compiles as shown:\n%s", i+1, src)
			continue
		}
		dir := t.TempDir()
		file := filepath.Join(dir, "main.go")
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		// A package directory that does not exist in the checkout; the
		// overlay puts the block there for this build only.
		pkg := filepath.Join(root, "readme-go-block")
		overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(pkg, "main.go"): file}})
		if err != nil {
			t.Fatal(err)
		}
		overlayFile := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
			t.Fatal(err)
		}
		// -buildvcs=false: git refuses a checkout owned by another user
		// (the unprivileged run), and the stamp is of no use here.
		cmd := exec.Command(goCmd, "build", "-buildvcs=false", "-overlay", overlayFile, "-o", os.DevNull, "./readme-go-block")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("README.md's Go block %d does not compile: %v\n%s\n%s", i+1, err, out, src)
		}
	}
}
