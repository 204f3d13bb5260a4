package mountdetect

import (
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseHugePageSize(t *testing.T) {
	for _, c := range []struct {
		opts   string
		size   int64
		ok     bool
		hasErr bool
	}{
		{"rw,relatime,pagesize=2M", 2 << 20, true, false},
		{"rw,relatime,pagesize=1G", 1 << 30, true, false},
		{"pagesize=2048k", 2 << 20, true, false},
		{"pagesize=2097152,rw", 2 << 20, true, false},
		{"pagesize=2Mi", 2 << 20, true, false},
		{"rw,relatime", 0, false, false},
		{"", 0, false, false},
		{"pagesize=", 0, true, true},
		{"pagesize=M", 0, true, true},
		{"pagesize=2X", 0, true, true},
		{"pagesize=99999999999E", 0, true, true},
		{"xpagesize=2M", 0, false, false},
	} {
		size, ok, err := ParseHugePageSize(c.opts)
		if size != c.size || ok != c.ok || (err != nil) != c.hasErr {
			t.Errorf("ParseHugePageSize(%q) = %d, %v, %v; want %d, %v, err=%v", c.opts, size, ok, err, c.size, c.ok, c.hasErr)
		}
	}
}

func TestFSTypeName(t *testing.T) {
	// hugetlbfs's magic does not fit in an int32: compare as uint32.
	if FSTypeName(0x958458f6) != "hugetlbfs" || FSTypeName(uint32(int32(0x01021994))) != "tmpfs" {
		t.Error("magic number mapping broken")
	}
	if got := FSTypeName(0x1234); got != "unknown(0x1234)" {
		t.Errorf("FSTypeName(0x1234) = %q", got)
	}
}

func TestCrossesMountErrorMessage(t *testing.T) {
	err := error(&CrossesMountError{Path: "/v", Mounts: []Mount{{MountPoint: "/v/nas", FSType: "nfs4", Source: "filer:/export"}, {MountPoint: "/v/f"}}})
	msg := err.Error()
	for _, want := range []string{"/v", "/v/nas", "nfs4", "filer:/export", "/v/f", "nothing was deleted"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	wrapped := errors.Join(errors.New("x"), err)
	if !errors.Is(wrapped, ErrCrossesMount) || errors.Is(wrapped, ErrInvalidPath) {
		t.Errorf("errors.Is through wrapping is wrong for %v", wrapped)
	}
	// Names inside a volume are chosen by whoever writes there: a newline or
	// "; " in a mount point must not split the message or forge an entry.
	forged := "/v/x\nrefusing to remove /v: nothing; /v/fake [nfs4 from filer:/export]"
	msg = (&CrossesMountError{Path: "/v\tdir", Mounts: []Mount{{MountPoint: forged, FSType: "tmpfs"}}}).Error()
	if strings.ContainsAny(msg, "\n\t") || !strings.Contains(msg, strconv.Quote(forged)) || !strings.Contains(msg, strconv.Quote("/v\tdir")) {
		t.Errorf("message %q does not quote the control characters and separators in its paths", msg)
	}
	if !errors.Is(ErrUnsupported, errors.ErrUnsupported) {
		t.Error("ErrUnsupported does not match errors.ErrUnsupported")
	}
}

func FuzzParseHugePageSize(f *testing.F) {
	f.Add("rw,relatime,pagesize=2M")
	f.Add("pagesize=1G,pagesize=2M")
	f.Add(",,pagesize=")
	f.Fuzz(func(t *testing.T, opts string) {
		size, ok, err := ParseHugePageSize(opts)
		if !ok && (err != nil || size != 0) {
			t.Fatalf("ParseHugePageSize(%q) = %d, %v, %v: no option but a result", opts, size, ok, err)
		}
		if ok && err == nil && !strings.Contains(opts, "pagesize=") {
			t.Fatalf("ParseHugePageSize(%q) found an option that is not there", opts)
		}
	})
}

func FuzzValidateRemovePath(f *testing.F) {
	for _, s := range []string{"/", "", "/a", "/a/..", "/a/.", "a", "//", "/a//b/", "/a/b/../c", "/..", "/a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		dir, base, err := validateRemovePath(p)
		if err != nil {
			if !errors.Is(err, ErrInvalidPath) {
				t.Fatalf("validateRemovePath(%q) error %v does not match ErrInvalidPath", p, err)
			}
			return
		}
		// An accepted path names a real element below some directory: never
		// the root, never relative, never "." or "..".
		if !filepath.IsAbs(p) || base == "" || base == "." || base == ".." || strings.Contains(base, "/") || !filepath.IsAbs(dir) {
			t.Fatalf("validateRemovePath(%q) accepted: dir %q base %q", p, dir, base)
		}
		if slices.Contains(strings.Split(p, "/"), "..") {
			t.Fatalf("validateRemovePath(%q) accepted a \"..\" element", p)
		}
		if filepath.Join(dir, base) != filepath.Clean(p) {
			t.Fatalf("validateRemovePath(%q): %q + %q != Clean %q", p, dir, base, filepath.Clean(p))
		}
	})
}
