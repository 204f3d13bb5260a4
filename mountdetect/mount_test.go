package mountdetect

import (
	"strings"
	"testing"
	"unicode"
)

// TestMountString: a mount is described by one rule everywhere: plain
// names as they are, names with control or format characters, invalid
// UTF-8 or the separators of a description Go-quoted, so that no name
// can split a line, reach a terminal as an escape sequence or forge an
// entry of a list.
func TestMountString(t *testing.T) {
	for _, tc := range []struct {
		m    Mount
		want string
	}{
		{Mount{MountPoint: "/v/nas", FSType: "nfs4", Source: "filer:/export"}, "/v/nas (nfs4 from filer:/export)"},
		{Mount{MountPoint: "/v/t", FSType: "tmpfs"}, "/v/t (tmpfs)"},
		{Mount{MountPoint: "/v/s", Source: "src"}, "/v/s (from src)"},
		{Mount{MountPoint: "/v/plain"}, "/v/plain"},
		{Mount{MountPoint: "/v/with space/naïve/日本"}, "/v/with space/naïve/日本"},
		{Mount{MountPoint: "/v/x\n\x1b[31mred", FSType: "tmpfs"}, `"/v/x\n\x1b[31mred" (tmpfs)`},
		{Mount{MountPoint: "/v/bad\xff", FSType: "fuse.a\tb", Source: "s\u202e"}, `"/v/bad\xff" ("fuse.a\tb" from "s\u202e")`},
		{Mount{MountPoint: "/v/fake (nfs4 from x); /v/y"}, `"/v/fake (nfs4 from x); /v/y"`},
		{Mount{MountPoint: `/v/q"uote`, Source: "a,b"}, `"/v/q\"uote" (from a,b)`},
		{Mount{MountPoint: "/tmp/TestX,_y/v [1]", FSType: "tmpfs"}, "/tmp/TestX,_y/v [1] (tmpfs)"},
		{Mount{MountPoint: `/v/back\slash`}, `/v/back\slash`},
	} {
		got := tc.m.String()
		if got != tc.want {
			t.Errorf("%#v.String() = %q; want %q", tc.m, got, tc.want)
		}
		if i := strings.IndexFunc(got, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }); i >= 0 {
			t.Errorf("%#v.String() = %q holds a raw control character", tc.m, got)
		}
	}
}
