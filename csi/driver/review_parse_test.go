package driver

import "testing"

// TestReviewSizeLimitOverflow: a sizeLimit beyond int64 bytes wrapped to a
// negative number (2^63: the request then fails with a confusing
// "negative sizeLimit") or became 0 (100E, 1e30: no limit at all, tmpfs's
// default size and no quota), silently. It must be an error naming it
// (or saturate at the largest int64, as ParseQuantity does for 8Ei).
func TestReviewSizeLimitOverflow(t *testing.T) {
	for _, s := range []string{"9223372036854775808", "9223372036854775807.5", "8Ei", "100E", "1e30", "1e100", "99999999999999999999Ki"} {
		a, err := parseAttributes(map[string]string{ctxEphemeral: "true", AttrMedium: "Memory", AttrSizeLimit: s})
		if err == nil && a.sizeLimit != 1<<63-1 { // apimachinery saturates binary suffixes: harmless
			t.Errorf("sizeLimit %q: accepted as %d bytes; want an error (beyond int64 bytes)", s, a.sizeLimit)
		}
	}
	for s, want := range map[string]int64{"9223372036854775807": 1<<63 - 1, "1E": 1e18, "1.5": 2, "1Gi": 1 << 30} {
		if a, err := parseAttributes(map[string]string{ctxEphemeral: "true", AttrSizeLimit: s}); err != nil || a.sizeLimit != want {
			t.Errorf("sizeLimit %q = %d, %v; want %d", s, a.sizeLimit, err, want)
		}
	}
}
