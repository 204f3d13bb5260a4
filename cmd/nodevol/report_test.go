package main

import (
	"bytes"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/mountdetect"
)

// RemoveAll joins a refusal for mounts met during the walk with any other
// failure; the CLI must report both, and exit 2 for the failure.
func TestWithoutCrossesMount(t *testing.T) {
	crossed := &mountdetect.CrossesMountError{Path: "/v", Mounts: []mountdetect.Mount{{MountPoint: "/v/m"}}, DuringWalk: true}
	other := &fs.PathError{Op: "unlinkat", Path: "/v/f", Err: fs.ErrPermission}
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"refusal only", crossed, nil},
		{"joined", errors.Join(crossed, other), other},
		{"other only", other, other},
	} {
		got := withoutCrossesMount(tc.err)
		if (got == nil) != (tc.want == nil) || (got != nil && !errors.Is(got, tc.want)) {
			t.Errorf("%s: withoutCrossesMount(%v) = %v; want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestWriteRmHumanDuringWalk(t *testing.T) {
	r := &rmResult{
		Path:         "/v",
		Refused:      true,
		NestedMounts: []mountdetect.Mount{{MountPoint: "/v/a", FSType: "nfs"}, {MountPoint: "/v/b"}},
		duringWalk:   true,
	}
	r.setErr(&fs.PathError{Op: "unlinkat", Path: "/v/f", Err: fs.ErrPermission})
	var stdout, stderr bytes.Buffer
	writeRmHuman(&stdout, &stderr, r)
	want := "refused /v: 2 mounts appeared during removal and were left untouched; everything else on the volume's own mount was removed:\n" +
		"  /v/a (nfs)\n" +
		"  /v/b\n" +
		"nodevol rm: unlinkat /v/f: permission denied\n"
	if stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("stdout %q, stderr:\n%s\nwant stderr:\n%s", stdout.String(), stderr.String(), want)
	}
	if r.code() != exitError {
		t.Errorf("code() = %d; want %d: an error beats a refusal", r.code(), exitError)
	}
	if strings.Contains(stderr.String(), "nothing was deleted") {
		t.Error("a refusal during the walk must not claim that nothing was deleted")
	}
}
