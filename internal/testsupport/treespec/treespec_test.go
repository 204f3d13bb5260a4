package treespec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBuild(t *testing.T) {
	dir := t.TempDir()
	if err := Build(dir, "dir a/b", "file a/c hello world", "symlink a/l /target"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "a/b")); err != nil || !fi.IsDir() {
		t.Errorf("a/b: %v, %v; want a directory", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a/c")); err != nil || string(b) != "hello world" {
		t.Errorf("a/c = %q, %v; want the rest of the line", b, err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "a/l")); err != nil || l != "/target" {
		t.Errorf("a/l -> %q, %v; want /target", l, err)
	}
	if err := Build(dir, "fifo x"); err == nil || !strings.Contains(err.Error(), `unknown kind "fifo"`) {
		t.Errorf("Build(fifo) = %v; want unknown kind", err)
	}
	if err := Build(dir, "file a/c/d x"); err == nil || !strings.Contains(err.Error(), `"file a/c/d x"`) {
		t.Errorf("Build under a file = %v; want an error naming the line", err)
	}
}
