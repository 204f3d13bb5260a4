package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func testImage() *Image {
	return &Image{
		Name:     "example.com/nodevol/test:v1.2.3",
		Platform: Platform{Architecture: "arm64", OS: "linux"},
		Config: Config{
			Entrypoint: []string{"/bin/prog"},
			Cmd:        []string{"serve"},
			Env:        []string{"PATH=/bin"},
			Labels:     map[string]string{"b": "2", "a": "1"},
		},
		Annotations: map[string]string{"org.opencontainers.image.version": "v1.2.3"},
		Entries: []Entry{
			{Path: "/tmp", Type: Dir, Mode: 0o777 | fs.ModeSticky},
			{Path: "/bin/prog", Type: File, Mode: 0o755, Data: []byte("#!binary")},
			{Path: "/bin/sh", Type: Symlink, Target: "prog"},
			{Path: "etc/passwd", Type: File, Mode: 0o644, Data: []byte("root:x:0:0::/:/bin/sh\n")},
		},
	}
}

// TestWriteReproducible writes the same image twice, and once more with
// its entries and maps built in another order: the bytes are the same.
func TestWriteReproducible(t *testing.T) {
	var a, b, c bytes.Buffer
	da, err := Write(&a, testImage())
	if err != nil {
		t.Fatalf("Write() = %v", err)
	}
	db, err := Write(&b, testImage())
	if err != nil {
		t.Fatalf("Write() = %v", err)
	}
	shuffled := testImage()
	slices.Reverse(shuffled.Entries)
	shuffled.Config.Labels = map[string]string{"a": "1", "b": "2"}
	dc, err := Write(&c, shuffled)
	if err != nil {
		t.Fatalf("Write() = %v", err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) || !bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Errorf("Write() of the same image gave different bytes (%d, %d, %d)", a.Len(), b.Len(), c.Len())
	}
	if da.Digest != db.Digest || da.Digest != dc.Digest {
		t.Errorf("manifest digests %s, %s, %s; want the same", da.Digest, db.Digest, dc.Digest)
	}
}

// TestWriteInspect writes an image and reads it back: the index names it,
// every blob verifies, and the layer has each entry, sorted, with its
// parents, owned by root, at the fixed time.
func TestWriteInspect(t *testing.T) {
	created := time.Date(2026, 11, 23, 10, 45, 57, 500, time.UTC)
	img := testImage()
	img.Created = created
	var buf bytes.Buffer
	desc, err := Write(&buf, img)
	if err != nil {
		t.Fatalf("Write() = %v", err)
	}
	l, err := Inspect(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("Inspect() = %v", err)
	}
	if l.Index.Digest != desc.Digest {
		t.Errorf("index.json manifest %s; Write returned %s", l.Index.Digest, desc.Digest)
	}
	if got := l.Index.Annotations[AnnotationImageName]; got != img.Name {
		t.Errorf("index %s = %q; want %q", AnnotationImageName, got, img.Name)
	}
	if got := l.Index.Annotations[AnnotationRefName]; got != "v1.2.3" {
		t.Errorf("index %s = %q; want the tag v1.2.3", AnnotationRefName, got)
	}
	if l.Index.Platform == nil || *l.Index.Platform != img.Platform || l.Config.Platform != img.Platform {
		t.Errorf("platform: index %+v, config %+v; want %+v", l.Index.Platform, l.Config.Platform, img.Platform)
	}
	if got := l.Manifest.Annotations["org.opencontainers.image.version"]; got != "v1.2.3" {
		t.Errorf("manifest annotation version = %q; want v1.2.3", got)
	}
	if l.Config.Created != "2026-11-23T10:45:57Z" {
		t.Errorf("config created = %q; want 2026-11-23T10:45:57Z", l.Config.Created)
	}
	if !slices.Equal(l.Config.Config.Entrypoint, []string{"/bin/prog"}) || !slices.Equal(l.Config.Config.Cmd, []string{"serve"}) {
		t.Errorf("config = %+v; want entrypoint /bin/prog, cmd serve", l.Config.Config)
	}

	want := []struct {
		name     string
		typeflag byte
		mode     int64
		data     string
		link     string
	}{
		{"bin/", tar.TypeDir, 0o755, "", ""},
		{"bin/prog", tar.TypeReg, 0o755, "#!binary", ""},
		{"bin/sh", tar.TypeSymlink, 0o777, "", "prog"},
		{"etc/", tar.TypeDir, 0o755, "", ""},
		{"etc/passwd", tar.TypeReg, 0o644, "root:x:0:0::/:/bin/sh\n", ""},
		{"tmp/", tar.TypeDir, 0o1777, "", ""},
	}
	if len(l.Layer) != len(want) {
		var names []string
		for _, f := range l.Layer {
			names = append(names, f.Header.Name)
		}
		t.Fatalf("layer holds %q; want %d entries", names, len(want))
	}
	for i, w := range want {
		h, data := l.Layer[i].Header, string(l.Layer[i].Data)
		if h.Name != w.name || h.Typeflag != w.typeflag || h.Mode != w.mode || data != w.data || h.Linkname != w.link {
			t.Errorf("layer entry %d = %q type %c mode %o data %q link %q; want %q type %c mode %o data %q link %q",
				i, h.Name, h.Typeflag, h.Mode, data, h.Linkname, w.name, w.typeflag, w.mode, w.data, w.link)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(created.Truncate(time.Second)) {
			t.Errorf("layer entry %s: owner %d:%d (%q:%q), mtime %v; want 0:0, no names, %v", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, created)
		}
	}
}

// TestWriteDefaults: a zero Created is the epoch, a zero platform the
// host's architecture on linux.
func TestWriteDefaults(t *testing.T) {
	img := testImage()
	img.Platform = Platform{}
	var buf bytes.Buffer
	if _, err := Write(&buf, img); err != nil {
		t.Fatalf("Write() = %v", err)
	}
	l, err := Inspect(&buf)
	if err != nil {
		t.Fatalf("Inspect() = %v", err)
	}
	if l.Config.Created != "1970-01-01T00:00:00Z" {
		t.Errorf("created = %q; want the epoch", l.Config.Created)
	}
	if l.Config.OS != "linux" || l.Config.Architecture == "" {
		t.Errorf("platform = %+v; want linux and the host's architecture", l.Config.Platform)
	}
}

func TestWriteRefuses(t *testing.T) {
	file := func(p string) Entry { return Entry{Path: p, Type: File, Mode: 0o644} }
	tests := []struct {
		name    string
		imgName string
		entries []Entry
		want    error
	}{
		{"dotdot", "", []Entry{file("/a/../../etc/passwd")}, ErrInvalidPath},
		{"root", "", []Entry{{Path: "/", Type: Dir, Mode: 0o755}}, ErrInvalidPath},
		{"empty", "", []Entry{file("")}, ErrInvalidPath},
		{"duplicate", "", []Entry{file("/a"), file("a")}, ErrDuplicate},
		{"parent is a file", "", []Entry{file("/a"), file("/a/b")}, ErrNotDir},
		{"parent is a symlink", "", []Entry{{Path: "/a", Type: Symlink, Target: "/"}, file("/a/b")}, ErrNotDir},
		{"symlink without target", "", []Entry{{Path: "/a", Type: Symlink}}, ErrInvalidEntry},
		{"no type", "", []Entry{{Path: "/a"}}, ErrInvalidEntry},
		{"dir with data", "", []Entry{{Path: "/a", Type: Dir, Data: []byte("x")}}, ErrInvalidEntry},
		{"name without tag", "example.com/a/b", nil, ErrInvalidName},
		{"name with port, no tag", "example.com:5000/a/b", nil, ErrInvalidName},
		{"name by digest", "example.com/a/b@sha256:00", nil, ErrInvalidName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := testImage()
			img.Entries = tt.entries
			if tt.imgName != "" {
				img.Name = tt.imgName
			}
			var buf bytes.Buffer
			if _, err := Write(&buf, img); !errors.Is(err, tt.want) {
				t.Errorf("Write() = %v; want %v", err, tt.want)
			}
		})
	}
}

// TestInspectRefusesTampered: a changed byte in any blob is caught.
func TestInspectRefusesTampered(t *testing.T) {
	var buf bytes.Buffer
	if _, err := Write(&buf, testImage()); err != nil {
		t.Fatalf("Write() = %v", err)
	}
	good := buf.Bytes()
	// Flip a byte of "#!binary" inside the layer blob.
	i := bytes.Index(good, []byte("#!binary"))
	if i < 0 {
		t.Fatal("layer content not found in the tarball")
	}
	bad := bytes.Clone(good)
	bad[i] = 'X'
	var be *BlobError
	if _, err := Inspect(bytes.NewReader(bad)); !errors.As(err, &be) || !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("Inspect(tampered layer) = %v; want a *BlobError matching ErrDigestMismatch", err)
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	host := filepath.Join(dir, "prog")
	if err := os.WriteFile(host, []byte("#!binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := FileFrom(host, "/bin/prog", 0o755)
	if err != nil {
		t.Fatalf("FileFrom(%q) = %v", host, err)
	}
	img := testImage()
	img.Entries = []Entry{e}
	out := filepath.Join(dir, "img.tar")
	desc, err := WriteFile(out, img)
	if err != nil {
		t.Fatalf("WriteFile(%q) = %v", out, err)
	}
	l, err := InspectFile(out)
	if err != nil {
		t.Fatalf("InspectFile(%q) = %v", out, err)
	}
	if l.Index.Digest != desc.Digest {
		t.Errorf("digest %s; WriteFile returned %s", l.Index.Digest, desc.Digest)
	}
	if h := l.Layer[1].Header; h.Name != "bin/prog" || h.Mode != 0o755 {
		t.Errorf("layer entry %q mode %o; want bin/prog mode 0755 (not the host's 0600)", h.Name, h.Mode)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("WriteFile left %s behind", e.Name())
		}
	}
}

// TestInspectRefusesLayerEntries: a layout whose digests all verify but
// whose layer holds an entry Layer would never write is refused.
func TestInspectRefusesLayerEntries(t *testing.T) {
	type ent struct {
		name string
		flag byte
		link string
	}
	dir := func(n string) ent { return ent{name: n, flag: tar.TypeDir} }
	reg := func(n string) ent { return ent{name: n, flag: tar.TypeReg} }
	tests := []struct {
		name    string
		entries []ent
		want    error
	}{
		{"dotdot", []ent{reg("../etc/passwd")}, ErrInvalidPath},
		{"dotdot inside", []ent{dir("a/"), reg("a/../../x")}, ErrInvalidPath},
		{"absolute", []ent{reg("/etc/passwd")}, ErrInvalidPath},
		{"not clean", []ent{dir("a/"), reg("a//b")}, ErrInvalidPath},
		{"dot", []ent{reg("./a")}, ErrInvalidPath},
		{"duplicate", []ent{reg("a"), reg("a")}, ErrDuplicate},
		{"under a symlink", []ent{{name: "etc", flag: tar.TypeSymlink, link: "/host/etc"}, reg("etc/passwd")}, ErrNotDir},
		{"parent not listed", []ent{reg("a/b")}, ErrNotDir},
		{"hard link", []ent{reg("a"), {name: "b", flag: tar.TypeLink, link: "a"}}, ErrInvalidEntry},
		{"device", []ent{{name: "dev", flag: tar.TypeChar}}, ErrInvalidEntry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var layer bytes.Buffer
			tw := tar.NewWriter(&layer)
			for _, e := range tt.entries {
				if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: e.flag, Linkname: e.link, Mode: 0o644}); err != nil {
					t.Fatal(err)
				}
			}
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if _, err := writeLayout(&buf, testImage(), "v1.2.3", layer.Bytes()); err != nil {
				t.Fatalf("writeLayout() = %v", err)
			}
			var ee *EntryError
			if _, err := Inspect(&buf); !errors.As(err, &ee) || !errors.Is(err, tt.want) {
				t.Errorf("Inspect(a layer with %v) = %v; want an *EntryError matching %v", tt.entries, err, tt.want)
			}
		})
	}
}
