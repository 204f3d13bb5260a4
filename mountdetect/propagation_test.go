package mountdetect

import "testing"

func TestParsePropagation(t *testing.T) {
	for _, tc := range []struct {
		optional string
		want     Propagation
		receives bool
		str      string
		err      bool
	}{
		{"", Propagation{}, false, "private", false},
		{"shared:1", Propagation{PeerGroup: 1}, true, "shared:1", false},
		{"master:5", Propagation{Master: 5}, true, "slave (master:5)", false},
		{"master:5 propagate_from:2", Propagation{Master: 5}, true, "slave (master:5)", false},
		{"shared:3 master:5", Propagation{PeerGroup: 3, Master: 5}, true, "shared:3, slave (master:5)", false},
		{"unbindable", Propagation{Unbindable: true}, false, "unbindable", false},
		{"somefuturefield:7", Propagation{}, false, "private", false},
		{"shared:", Propagation{}, false, "", true},
		{"shared", Propagation{}, false, "", true},
		{"master:x", Propagation{}, false, "", true},
		{"shared:0", Propagation{}, false, "", true},
		{"shared:-1", Propagation{}, false, "", true},
	} {
		got, err := parsePropagation(tc.optional)
		if (err != nil) != tc.err {
			t.Errorf("parsePropagation(%q) error = %v; want error %v", tc.optional, err, tc.err)
			continue
		}
		if tc.err {
			continue
		}
		if got != tc.want || got.Receives() != tc.receives || got.String() != tc.str {
			t.Errorf("parsePropagation(%q) = %+v (receives %v, %q); want %+v (receives %v, %q)",
				tc.optional, got, got.Receives(), got.String(), tc.want, tc.receives, tc.str)
		}
	}
}
