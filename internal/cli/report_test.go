package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"syscall"
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
	if r.code() != ExitError {
		t.Errorf("code() = %d; want %d: an error beats a refusal", r.code(), ExitError)
	}
	if strings.Contains(stderr.String(), "nothing was deleted") {
		t.Error("a refusal during the walk must not claim that nothing was deleted")
	}
}

// joinedOnly is an error joined from several that is not errors.Join's.
type joinedOnly []error

func (j joinedOnly) Error() string {
	var msgs []string
	for _, e := range j {
		msgs = append(msgs, e.Error())
	}
	return strings.Join(msgs, "\n")
}
func (j joinedOnly) Unwrap() []error { return j }

func TestFlattenErrors(t *testing.T) {
	a := &fs.PathError{Op: "unlinkat", Path: "/v/a", Err: fs.ErrPermission}
	b := &fs.PathError{Op: "unlinkat", Path: "/v/b", Err: fs.ErrPermission}
	c := &fs.PathError{Op: "rmdir", Path: "/v/c", Err: syscall.ENOTEMPTY}
	sentinel := errors.New("not a pod volume path")
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"nil", nil, nil},
		{"one", a, []string{a.Error()}},
		{"joined", errors.Join(a, b, c), []string{a.Error(), b.Error(), c.Error()}},
		{"joined twice", errors.Join(a, errors.Join(b, c)), []string{a.Error(), b.Error(), c.Error()}},
		{"any Unwrap() []error", joinedOnly{a, joinedOnly{b, c}}, []string{a.Error(), b.Error(), c.Error()}},
		{"words around a join", fmt.Errorf("clean subpath mounts first: %w", errors.Join(a, b)),
			[]string{"clean subpath mounts first: " + a.Error(), "clean subpath mounts first: " + b.Error()}},
		{"words on both sides", fmt.Errorf("remove (%w) failed", errors.Join(a, b)),
			[]string{"remove (" + a.Error() + ") failed", "remove (" + b.Error() + ") failed"}},
		{"%w: %w is one failure", fmt.Errorf("%w: %w", sentinel, a), []string{"not a pod volume path: " + a.Error()}},
		{"%w: %w of a join", fmt.Errorf("%w: %w", sentinel, errors.Join(a, b)),
			[]string{"not a pod volume path: " + a.Error(), "not a pod volume path: " + b.Error()}},
		{"two joins in one message stay whole", fmt.Errorf("%w and %w", errors.Join(a, b), errors.Join(b, c)),
			[]string{a.Error() + "\n" + b.Error() + " and " + b.Error() + "\n" + c.Error()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := flattenErrors(tc.err)
			var got []string
			for _, p := range parts {
				got = append(got, p.Error())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("flattenErrors = %q, want %q", got, tc.want)
			}
			// Each part still reaches the failure it names.
			for i, p := range parts {
				for _, f := range []error{a, b, c} {
					if strings.Contains(got[i], f.Error()) && !errors.Is(p, f) && len(parts) > 1 {
						t.Errorf("part %q does not wrap %v", p, f)
					}
				}
			}
		})
	}
}

// manyErrors joins n distinct failures.
func manyErrors(n int) error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = &fs.PathError{Op: "unlinkat", Path: fmt.Sprintf("/v/f%03d", i), Err: fs.ErrPermission}
	}
	return errors.Join(errs...)
}

// Every failure is reported, in the human output one line each and in
// --json as "errors", however many there are (the library bounds them);
// failures the library only counted (its MoreErrorsError) are a count.
func TestSeveralErrorsReported(t *testing.T) {
	for _, tc := range []struct{ listed, more int }{{3, 0}, {100, 0}, {150, 0}, {100, 42}} {
		t.Run(fmt.Sprintf("%d+%d", tc.listed, tc.more), func(t *testing.T) {
			err := manyErrors(tc.listed)
			if tc.more > 0 {
				err = errors.Join(err, &mountdetect.MoreErrorsError{N: tc.more})
			}
			listed, more, n := tc.listed, tc.more, tc.listed+tc.more
			wantLines := func(out, prefix string) {
				t.Helper()
				lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
				if more > 0 {
					if last := lines[len(lines)-1]; last != fmt.Sprintf("%s... and %d more errors", prefix, more) {
						t.Errorf("last line %q, want the count of the %d errors not listed", last, more)
					}
					lines = lines[:len(lines)-1]
				}
				if len(lines) != listed {
					t.Fatalf("%d lines, want %d:\n%s", len(lines), listed, out)
				}
				for i, l := range lines {
					if want := fmt.Sprintf("%sunlinkat /v/f%03d: permission denied", prefix, i); l != want {
						t.Errorf("line %d = %q, want %q", i, l, want)
					}
				}
			}
			wantJSON := func(v any) {
				t.Helper()
				b, jerr := json.Marshal(v)
				if jerr != nil {
					t.Fatal(jerr)
				}
				var obj struct {
					Error      string   `json:"error"`
					Errors     []string `json:"errors"`
					MoreErrors *int     `json:"moreErrors"`
				}
				if jerr := json.Unmarshal(b, &obj); jerr != nil {
					t.Fatal(jerr)
				}
				if len(obj.Errors) != listed || obj.Errors[listed-1] != fmt.Sprintf("unlinkat /v/f%03d: permission denied", listed-1) {
					t.Errorf("errors has %d elements, want %d: %s", len(obj.Errors), listed, b)
				}
				switch {
				case more == 0 && obj.MoreErrors != nil:
					t.Errorf("moreErrors = %d, want it absent", *obj.MoreErrors)
				case more > 0 && (obj.MoreErrors == nil || *obj.MoreErrors != more):
					t.Errorf("moreErrors absent or wrong, want %d: %s", more, b)
				}
				if obj.Error != err.Error() {
					t.Errorf("error is not the whole error text")
				}
			}

			rm := &rmResult{Path: "/v", NestedMounts: []mountdetect.Mount{}}
			rm.setErr(err)
			var stdout, stderr bytes.Buffer
			writeRmHuman(&stdout, &stderr, rm)
			wantLines(stderr.String(), "nodevol rm: ")
			wantJSON(rm)

			td := &teardownResult{Path: "/v", Mounts: []mountdetect.Mount{}}
			td.setErr(fmt.Errorf("%w", err))
			stderr.Reset()
			writeTeardownHuman(&stdout, &stderr, td)
			wantLines(stderr.String(), "nodevol teardown: ")
			wantJSON(td)

			c := checkResult{Path: "/v", NestedMounts: []mountdetect.Mount{}}
			c = c.fail(err)
			stdout.Reset()
			writeCheckHuman(&stdout, &c)
			out := stdout.String()
			head := fmt.Sprintf("/v\n  errors:        %d\n", n)
			tail := "  verdict:       UNSAFE: could not be examined\n"
			if !strings.HasPrefix(out, head) || !strings.HasSuffix(out, tail) {
				t.Fatalf("check output does not start %q and end %q:\n%s", head, tail, out)
			}
			wantLines(strings.TrimSuffix(strings.TrimPrefix(out, head), tail), "    ")
			wantJSON(&c)

		})
	}
}

// TestMoreErrorsErrorIsCounted: RemoveAll's own count of the failures it
// did not list adds to "more", it is not reported as a failure.
func TestMoreErrorsErrorIsCounted(t *testing.T) {
	err := errors.Join(manyErrors(3), &mountdetect.MoreErrorsError{N: 7})
	msgs, more := errorList(err)
	if len(msgs) != 3 || more != 7 {
		t.Errorf("errorList = %q, %d; want the 3 failures and 7 more", msgs, more)
	}
	// Two results joined (RemoveAll's 100 and another failure): every
	// listed failure is reported, none dropped by a limit of the CLI's own.
	err = errors.Join(manyErrors(100), &mountdetect.MoreErrorsError{N: 5}, manyErrors(2))
	if msgs, more := errorList(err); len(msgs) != 102 || more != 5 {
		t.Errorf("errorList = %d messages, %d more; want 102 and 5", len(msgs), more)
	}
}
