// Package plural picks the singular or plural of a word for nodevol's
// messages, so that every message counts things the same way.
package plural

import "strconv"

// Of returns one when n is 1 and many otherwise: Of(n, "is", "are").
func Of(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Count returns n and the noun, with an "s" added unless n is 1:
// Count(1, "mount") is "1 mount", Count(2, "mount") "2 mounts".
func Count(n int, noun string) string {
	return strconv.Itoa(n) + " " + Of(n, noun, noun+"s")
}
