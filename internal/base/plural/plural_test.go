package plural

import "testing"

func TestOf(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "are"}, {1, "is"}, {2, "are"}, {-1, "are"}} {
		if got := Of(c.n, "is", "are"); got != c.want {
			t.Errorf("Of(%d, %q, %q) = %q; want %q", c.n, "is", "are", got, c.want)
		}
	}
}

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "0 mounts"}, {1, "1 mount"}, {2, "2 mounts"}, {100, "100 mounts"}} {
		if got := Count(c.n, "mount"); got != c.want {
			t.Errorf("Count(%d, %q) = %q; want %q", c.n, "mount", got, c.want)
		}
	}
}
