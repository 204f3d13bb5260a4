// Package errlist keeps the failures of an operation that may meet many,
// bounded: a tree of a million entries that all fail must not hold a
// million errors, and which failures are reported must not depend on the
// order a (parallel) walk met them.
//
// The rule, the same for every operation that reports failures one by
// one (mountdetect's RemoveAll, subpath's Check and Clean): the Max
// failures with the smallest paths are kept, sorted by path (those of
// one path in the order they came), and the rest are counted. The path of
// a failure is that of the *os.PathError it holds, else its message.
package errlist

import (
	"errors"
	"os"
	"slices"
	"strings"
)

// Max is how many failures a List keeps.
const Max = 100

// List is a bounded list of failures. The zero List is empty and ready;
// it is not safe for concurrent use.
type List struct {
	errs    []error
	dropped int
}

// Add records err. Memory stays within twice Max errors.
func (l *List) Add(err error) {
	l.errs = append(l.errs, err)
	if len(l.errs) >= 2*Max {
		l.trim()
	}
}

// Len is how many failures were added, kept or not.
func (l *List) Len() int { return len(l.errs) + l.dropped }

// Errors returns the failures kept (at most Max, sorted by path) and how
// many more there were.
func (l *List) Errors() (kept []error, more int) {
	l.trim()
	return slices.Clip(l.errs), l.dropped
}

// trim sorts the failures by path and drops all but the Max smallest.
func (l *List) trim() {
	slices.SortStableFunc(l.errs, func(a, b error) int { return strings.Compare(path(a), path(b)) })
	if len(l.errs) > Max {
		clear(l.errs[Max:])
		l.dropped += len(l.errs) - Max
		l.errs = l.errs[:Max]
	}
}

// path is the path a failure is sorted by.
func path(err error) string {
	if pe, ok := errors.AsType[*os.PathError](err); ok {
		return pe.Path
	}
	return err.Error()
}
