package errlist

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
)

// TestList: the Max failures with the smallest paths are kept, sorted
// (those of one path in the order they came), whatever the order they
// came in; the rest are counted, and memory stays bounded.
func TestList(t *testing.T) {
	const n = 5*Max + 7
	var l List
	for i := range n {
		// Descending, so that the smallest paths come last.
		l.Add(&os.PathError{Op: "unlinkat", Path: fmt.Sprintf("/v/%04d", n-1-i), Err: os.ErrPermission})
		if cap(l.errs) > 4*Max {
			t.Fatalf("after %d failures the list holds room for %d", i+1, cap(l.errs))
		}
	}
	l.Add(fmt.Errorf("wrapped: %w", &os.PathError{Op: "open", Path: "/v/0000", Err: os.ErrNotExist}))
	l.Add(errors.New("/v/0001 is a message"))
	if l.Len() != n+2 {
		t.Errorf("Len = %d; want %d", l.Len(), n+2)
	}
	kept, more := l.Errors()
	if len(kept) != Max || more != n+2-Max {
		t.Fatalf("Errors = %d kept, %d more; want %d, %d", len(kept), more, Max, n+2-Max)
	}
	var paths []string
	for _, err := range kept {
		paths = append(paths, path(err))
	}
	if !slices.IsSorted(paths) || paths[0] != "/v/0000" || paths[Max-1] != fmt.Sprintf("/v/%04d", Max-3) {
		t.Errorf("kept paths %q..%q (sorted: %v); want the %d smallest", paths[0], paths[Max-1], slices.IsSorted(paths), Max)
	}
	// One path: the order they came in.
	if pe, ok := kept[0].(*os.PathError); !ok || pe.Op != "unlinkat" {
		t.Errorf("first of /v/0000 = %v; want the one added first", kept[0])
	}
	var empty List
	if k, m := empty.Errors(); len(k) != 0 || m != 0 || empty.Len() != 0 {
		t.Errorf("empty List: %v, %d, %d", k, m, empty.Len())
	}
}
