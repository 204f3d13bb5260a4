package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The demo's own checks must be able to fail: a demo that cannot notice
// lost data would prove nothing.
func TestDemoNoticesBrokenPromises(t *testing.T) {
	d := &demo{out: io.Discard, tmp: t.TempDir()}
	file := filepath.Join(d.tmp, "important.txt")

	if err := d.intact(file, "important.txt"); err == nil || !strings.Contains(err.Error(), "PROMISE BROKEN: the NAS lost") {
		t.Errorf("intact(missing file) = %v; want a broken promise", err)
	}
	if err := os.WriteFile(file, []byte("truncated"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.intact(file, "important.txt"); err == nil || !strings.Contains(err.Error(), "PROMISE BROKEN: important.txt changed") {
		t.Errorf("intact(changed file) = %v; want a broken promise", err)
	}
	if err := os.WriteFile(file, []byte(demoNASData), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.intact(file, "important.txt"); err != nil {
		t.Errorf("intact(unchanged file) = %v; want nil", err)
	}

	if err := d.step("nodevol rm $VOL", exitRefused, func(io.Writer) int { return exitOK }); err == nil || !strings.Contains(err.Error(), "PROMISE BROKEN") {
		t.Errorf("step exiting 0 where 1 was promised = %v; want a broken promise", err)
	}
	if err := d.step("nodevol rm $VOL", exitOK, func(io.Writer) int { return exitOK }); err != nil {
		t.Errorf("step exiting as promised = %v; want nil", err)
	}
}
