package fsquota

import (
	"slices"
	"strings"
	"testing"
)

func TestParseProjects(t *testing.T) {
	data := "# managed by hand\n" +
		"1048577:/var/lib/kubelet/pods/a/volumes/kubernetes.io~empty-dir/cache\n" +
		"\n" +
		"garbage without colon\n" +
		"0:/zero/is/not/an/id\n" +
		"4294967295:/neither/is/max\n" +
		"-5:/negative\n" +
		"12:relative/path\n" +
		"42:/with:colon\n" +
		"1048578:/b"
	f := parseProjects(data)
	var ok []string
	for _, l := range f.lines {
		if l.ok {
			ok = append(ok, l.raw)
		}
	}
	want := []string{
		"1048577:/var/lib/kubelet/pods/a/volumes/kubernetes.io~empty-dir/cache",
		"42:/with:colon",
		"1048578:/b",
	}
	if !slices.Equal(ok, want) {
		t.Errorf("parsed entries = %q; want %q", ok, want)
	}
	if got, want := string(f.bytes()), data+"\n"; got != want {
		t.Errorf("bytes() = %q; want the input unchanged (plus a final newline) %q", got, want)
	}
	if id, ok := f.idForPath("/with:colon"); !ok || id != 42 {
		t.Errorf("idForPath(/with:colon) = %d, %v; want 42, true", id, ok)
	}
}

func TestParseProjid(t *testing.T) {
	data := "volume1048577:1048577\n#comment:5\nweird line\nname:with:colons:7\n:8\n spaced:9\nbad:x\nok:10\n"
	f := parseProjid(data)
	var names []string
	for _, l := range f.lines {
		if l.ok {
			names = append(names, l.name)
		}
	}
	if want := []string{"volume1048577", "ok"}; !slices.Equal(names, want) {
		t.Errorf("parsed names = %q; want %q", names, want)
	}
	if got := string(f.bytes()); got != data {
		t.Errorf("bytes() = %q; want %q", got, data)
	}
}

func TestProjectsEdits(t *testing.T) {
	f := parseProjects("junk\n5:/a\n6:/b\n5:/a\n# tail\n")
	if changed, err := f.add(5, "/a"); changed || err != nil {
		t.Errorf("add(5, /a) again = %v, %v; want false, nil", changed, err)
	}
	if _, err := f.add(7, "relative"); err == nil {
		t.Error("add(7, relative) = nil; want an error")
	}
	if _, err := f.add(7, "/new\nline"); err == nil {
		t.Error("add with a newline in the path = nil; want an error")
	}
	if changed, err := f.add(7, "/c"); !changed || err != nil {
		t.Errorf("add(7, /c) = %v, %v; want true, nil", changed, err)
	}
	if ids := f.removePath("/a"); !slices.Equal(ids, []uint32{5, 5}) {
		t.Errorf("removePath(/a) = %v; want [5 5]", ids)
	}
	if got, want := string(f.bytes()), "junk\n6:/b\n# tail\n7:/c\n"; got != want {
		t.Errorf("after edits: %q; want %q", got, want)
	}
	if f.hasID(5) || !f.hasID(6) {
		t.Errorf("hasID(5), hasID(6) = %v, %v; want false, true", f.hasID(5), f.hasID(6))
	}
}

func TestProjidEdits(t *testing.T) {
	f := parseProjid("keep me\nvolume5:5\n")
	if changed, _ := f.add("other", 5); changed {
		t.Error("add for an ID that has a name changed the file")
	}
	if _, err := f.add("volume5", 6); err == nil {
		t.Error("add of a name used by another ID = nil; want an error")
	}
	if _, err := f.add("bad:name", 6); err == nil {
		t.Error("add of a name with a colon = nil; want an error")
	}
	if changed, err := f.add("volume6", 6); !changed || err != nil {
		t.Errorf("add(volume6, 6) = %v, %v", changed, err)
	}
	if !f.removeID(5) || f.removeID(5) {
		t.Error("removeID(5) should change the file once")
	}
	if got, want := string(f.bytes()), "keep me\nvolume6:6\n"; got != want {
		t.Errorf("after edits: %q; want %q", got, want)
	}
}

// normalized is what a parsed file writes back: the same lines, each
// ending in a newline.
func normalized(data string) string {
	if data != "" && !strings.HasSuffix(data, "\n") {
		return data + "\n"
	}
	return data
}

func FuzzParseProjects(f *testing.F) {
	f.Add("1048577:/a\n# c\n\n2:/b:c\nx")
	f.Add("")
	f.Add("\n\n")
	f.Add("4294967294:/max\n4294967295:/over\n0:/zero\n")
	f.Fuzz(func(t *testing.T, data string) {
		p := parseProjects(data)
		if got := string(p.bytes()); got != normalized(data) {
			t.Fatalf("round trip of %q = %q", data, got)
		}
		for _, l := range p.lines {
			if !l.ok {
				continue
			}
			if l.id == 0 || !validEntryPath(l.path) || strings.Contains(l.raw, "\n") {
				t.Fatalf("accepted a bad entry %+v", l)
			}
			again := parseProjects(l.raw)
			if len(again.lines) != 1 || again.lines[0] != l {
				t.Fatalf("re-parsing %q = %+v; want %+v", l.raw, again.lines, l)
			}
		}
		// Edits touch only their own lines.
		before := len(p.lines)
		if changed, err := p.add(1234, "/fuzz/added"); err != nil || (!changed && !p.hasID(1234)) {
			t.Fatalf("add = %v, %v", changed, err)
		}
		p.removePath("/fuzz/added")
		if len(p.lines) > before {
			t.Fatalf("add+remove grew the file: %d lines, had %d", len(p.lines), before)
		}
	})
}

func FuzzParseProjid(f *testing.F) {
	f.Add("volume1048577:1048577\n#x:1\nname:with:colons:7\n")
	f.Add(":1\n a:2\nb:\n")
	f.Fuzz(func(t *testing.T, data string) {
		p := parseProjid(data)
		if got := string(p.bytes()); got != normalized(data) {
			t.Fatalf("round trip of %q = %q", data, got)
		}
		for _, l := range p.lines {
			if l.ok && (l.id == 0 || strings.Contains(l.name, ":") || !validName(l.name)) {
				t.Fatalf("accepted a bad entry %+v", l)
			}
		}
	})
}
