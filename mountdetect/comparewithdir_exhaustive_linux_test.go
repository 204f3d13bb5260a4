package mountdetect

import (
	"strings"
	"testing"
)

// TestCompareWithDirEveryShortPath: compareWithDir and isBeneath say what
// the strings they stand for say (strings.Compare with dir+"/",
// strings.HasPrefix), for every pair of strings of up to four bytes from
// '/', the bytes on either side of it ('.', '0'), a letter and the
// extreme bytes 0x00 and 0xff: the root "/" (dir ""), repeated and
// trailing slashes, proper prefixes, and names that sort between dir and
// dir+"/".
func TestCompareWithDirEveryShortPath(t *testing.T) {
	alphabet := []byte{'/', '.', '0', 'a', 0x00, 0xff}
	words := []string{""}
	for n, from := 0, 0; n < 4; n++ {
		to := len(words)
		for _, w := range words[from:to] {
			for _, c := range alphabet {
				words = append(words, w+string(c))
			}
		}
		from = to
	}
	bad := 0
	for _, s := range words {
		for _, dir := range words {
			if got, want := compareWithDir(s, dir), strings.Compare(s, dir+"/"); got != want {
				if bad++; bad < 10 {
					t.Errorf("compareWithDir(%q, %q) = %d, want %d", s, dir, got, want)
				}
			}
			if got, want := isBeneath(s, dir), strings.HasPrefix(s, dir+"/"); got != want {
				if bad++; bad < 10 {
					t.Errorf("isBeneath(%q, %q) = %v, want %v", s, dir, got, want)
				}
			}
		}
	}
}
