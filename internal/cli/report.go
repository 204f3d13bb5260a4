package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nodevol/nodevol/internal/base/plural"
	"github.com/nodevol/nodevol/mountdetect"
)

// failureJSON is the failure part of a --json result:
//
//	"error"      the whole error text, as before (several failures are on
//	             separate lines of it);
//	"errors"     every failure's message, one per element: every one the
//	             library returned (it bounds them itself: RemoveAll lists
//	             at most 100, then a *mountdetect.MoreErrorsError);
//	"moreErrors" how many failures the library counted without listing
//	             them (its MoreErrorsError).
//
// All three are absent when nothing failed.
type failureJSON struct {
	Error      string   `json:"error,omitempty"`
	Errors     []string `json:"errors,omitempty"`
	MoreErrors int      `json:"moreErrors,omitempty"`
}

// record fills the failure fields from err.
func (f *failureJSON) record(err error) {
	f.Error = err.Error()
	f.Errors, f.MoreErrors = errorList(err)
}

// flattenErrors lists every failure err holds, so that none is reported
// only as part of another's text:
//
//   - an error joined from several (errors.Join, or any error with
//     Unwrap() []error whose message is its parts' messages one per line)
//     is replaced by its parts, recursively;
//   - an error that wraps such a join in words of its own ("clean subpath
//     mounts first: " + a join) becomes one error per part, each with
//     those words around it, so every line still says what failed;
//   - anything else is one failure, even with several %w inside: a
//     fmt.Errorf("%w: %w", ErrNotVolumePath, err) is one failure with its
//     cause, not two.
//
// The parts keep their chain: errors.Is and errors.As still reach what each
// wraps.
func flattenErrors(err error) []error {
	if err == nil {
		return nil
	}
	var parts []error
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		parts = u.Unwrap()
		if isJoined(err, parts) {
			var out []error
			for _, p := range parts {
				out = append(out, flattenErrors(p)...)
			}
			return out
		}
	case interface{ Unwrap() error }:
		if p := u.Unwrap(); p != nil {
			parts = []error{p}
		}
	}
	// Words around a single part that holds several failures are given to
	// each of them.
	var several []error
	var inner error
	for _, p := range parts {
		if f := flattenErrors(p); len(f) > 1 {
			if several != nil {
				return []error{err} // more than one such part: keep it whole
			}
			several, inner = f, p
		}
	}
	msg, innerMsg := err.Error(), ""
	if inner != nil {
		innerMsg = inner.Error()
	}
	if several == nil || strings.Count(msg, innerMsg) != 1 {
		return []error{err}
	}
	i := strings.Index(msg, innerMsg)
	out := make([]error, len(several))
	for j, p := range several {
		out[j] = &inContext{before: msg[:i], err: p, after: msg[i+len(innerMsg):]}
	}
	return out
}

// isJoined reports whether err, which unwraps to parts, is their join: its
// message is theirs, one per line, as errors.Join writes it.
func isJoined(err error, parts []error) bool {
	if len(parts) == 0 {
		return false
	}
	msgs := make([]string, len(parts))
	for i, p := range parts {
		msgs[i] = p.Error()
	}
	return err.Error() == strings.Join(msgs, "\n")
}

// inContext is one failure of several that an error wrapped together, with
// the words that error put around them.
type inContext struct {
	before string
	err    error
	after  string
}

func (e *inContext) Error() string { return e.before + e.err.Error() + e.after }
func (e *inContext) Unwrap() error { return e.err }

// errorList is the messages of every failure err holds (flattenErrors),
// none left out, and how many more the library counted without listing
// them.
//
// A *mountdetect.MoreErrorsError among them (RemoveAll's own count of the
// failures past the 100 it lists) is not a failure of its own: it adds to
// more. The CLI adds no limit of its own: an operator who runs rm without
// the permission to remove a tree sees every directory it could not open,
// not the first and a count.
func errorList(err error) (msgs []string, more int) {
	for _, e := range flattenErrors(err) {
		var counted *mountdetect.MoreErrorsError
		if errors.As(e, &counted) {
			more += counted.N
			continue
		}
		msgs = append(msgs, e.Error())
	}
	return msgs, more
}

// writeErrors prints every failure err holds on a line of its own, as
// prefix+message+suffix with the message escaped (display), then
// "prefix... and N more errors" when the library counted failures it did
// not list.
func writeErrors(w io.Writer, prefix string, err error, suffix string) {
	msgs, more := errorList(err)
	for _, m := range msgs {
		fmt.Fprintf(w, "%s%s%s\n", prefix, display(m), suffix)
	}
	if more > 0 {
		fmt.Fprintf(w, "%s... and %s\n", prefix, plural.Count(more, "more error"))
	}
}

// display makes s safe to print in the human output, where a name or path
// found on disk is not to be trusted: a volume directory named
// "x\nfake-row\t..." must not forge a row of the scan table, and an escape
// sequence must not reach the terminal.
//
// Printable text is left as it is, spaces and non-ASCII letters included,
// so that ordinary paths can be copied from the output. Everything else is
// written as in a Go string literal, without quotes: newline as \n, tab as
// \t, other control and format characters (ESC, U+2028, U+202E) as \x1b,
// \u2028, \u202e, and each byte of invalid UTF-8 as \xff. A backslash is
// left as it is, so "a\nb" in the output may be either name; the --json
// output, which escapes nothing away, tells them apart.
func display(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || !isDisplayable(r) })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for s = s[i:]; s != ""; {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case isDisplayable(r):
			b.WriteString(s[:size])
		default:
			q := strconv.QuoteRune(r) // '\n', '\x1b', '\u2028'
			b.WriteString(q[1 : len(q)-1])
		}
		s = s[size:]
	}
	return b.String()
}

// isDisplayable reports whether display leaves r as it is.
func isDisplayable(r rune) bool { return r == ' ' || strconv.IsPrint(r) }
