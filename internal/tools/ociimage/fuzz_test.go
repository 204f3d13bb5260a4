package ociimage

import (
	"bytes"
	"testing"
)

// FuzzInspect: Inspect of any bytes returns a layout or an error, never
// panics; and whatever it accepts has an index digest that matches the
// manifest it read.
func FuzzInspect(f *testing.F) {
	var buf bytes.Buffer
	if _, err := Write(&buf, testImage()); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte{})
	f.Add(buf.Bytes()[:1024])
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := Inspect(bytes.NewReader(b))
		if err != nil {
			return
		}
		if l.Index.MediaType != MediaTypeManifest || len(l.Manifest.Layers) != 1 {
			t.Errorf("Inspect accepted index %+v, manifest %+v", l.Index, l.Manifest)
		}
	})
}

// FuzzLayer: Layer of any one path either refuses it or writes a tar
// that names it without a leading "/" and without "..".
func FuzzLayer(f *testing.F) {
	for _, p := range []string{"/a/b", "a", "../x", "/", "a//b/./c", "a/\x00b"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		b, err := Layer([]Entry{{Path: p, Type: File, Mode: 0o644}}, Epoch)
		if err != nil {
			return
		}
		var img bytes.Buffer
		if _, err := Write(&img, &Image{Name: "x:y", Entries: []Entry{{Path: p, Type: File, Mode: 0o644}}}); err != nil {
			t.Fatalf("Layer(%q) accepted, Write refused: %v", p, err)
		}
		l, err := Inspect(&img)
		if err != nil {
			t.Fatalf("Inspect(Write(%q)) = %v", p, err)
		}
		if len(b) == 0 || len(l.Layer) == 0 {
			t.Fatalf("Layer(%q) wrote nothing", p)
		}
		for _, f := range l.Layer {
			n := f.Header.Name
			if n == "" || n[0] == '/' || n == ".." || bytes.Contains([]byte("/"+n+"/"), []byte("/../")) {
				t.Errorf("Layer(%q) wrote entry %q", p, n)
			}
		}
	})
}
