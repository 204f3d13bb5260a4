package ociimage

import (
	"bytes"
	"errors"
	"testing"
)

// platformImages are testImage for amd64 and arm64, the arm64 one with
// other contents (another binary), as a release builds them.
func platformImages() []*Image {
	amd, arm := testImage(), testImage()
	amd.Platform = Platform{Architecture: "amd64", OS: "linux"}
	arm.Platform = Platform{Architecture: "arm64", OS: "linux"}
	arm.Entries = append(arm.Entries, Entry{Path: "/arm64", Type: File, Mode: 0o644, Data: []byte("arm64\n")})
	return []*Image{amd, arm}
}

func TestWriteIndexInspect(t *testing.T) {
	var a, b bytes.Buffer
	da, err := WriteIndex(&a, "example.com/a/b:v1.2.3", platformImages())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := WriteIndex(&b, "example.com/a/b:v1.2.3", platformImages()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("WriteIndex twice: different bytes")
	}
	l, err := InspectIndex(bytes.NewReader(a.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if l.Index.Digest != da.Digest || l.Index.MediaType != MediaTypeIndex ||
		l.Index.Annotations[AnnotationImageName] != "example.com/a/b:v1.2.3" || l.Index.Annotations[AnnotationRefName] != "v1.2.3" {
		t.Errorf("index.json's entry %+v; WriteIndex returned %+v", l.Index, da)
	}
	if len(l.Images) != 2 {
		t.Fatalf("%d images; want 2", len(l.Images))
	}
	for i, arch := range []string{"amd64", "arm64"} {
		img := l.Images[i]
		if img.Index.Platform == nil || img.Index.Platform.Architecture != arch || img.Config.Architecture != arch {
			t.Errorf("image %d: platform %+v, config %+v; want %s", i, img.Index.Platform, img.Config.Platform, arch)
		}
		// Each platform's manifest is the one Write writes for that image
		// alone: the same digest a single-platform build of it has.
		var single bytes.Buffer
		ds, err := Write(&single, platformImages()[i])
		if err != nil {
			t.Fatal(err)
		}
		if ds.Digest != img.Index.Digest {
			t.Errorf("%s: manifest %s in the index, %s written alone", arch, img.Index.Digest, ds.Digest)
		}
	}
	if _, err := Inspect(bytes.NewReader(a.Bytes())); !errors.Is(err, ErrInvalidLayout) {
		t.Errorf("Inspect of a multi-platform layout = %v; want ErrInvalidLayout", err)
	}
	var one bytes.Buffer
	if _, err := Write(&one, testImage()); err != nil {
		t.Fatal(err)
	}
	if _, err := InspectIndex(bytes.NewReader(one.Bytes())); !errors.Is(err, ErrInvalidLayout) {
		t.Errorf("InspectIndex of a single-image layout = %v; want ErrInvalidLayout", err)
	}
}

func TestWriteIndexRefuses(t *testing.T) {
	twice := platformImages()
	twice[1].Platform = twice[0].Platform
	late := platformImages()
	late[1].Created = late[0].Created.Add(1e9)
	for name, imgs := range map[string][]*Image{"none": nil, "one platform twice": twice, "created apart": late} {
		if _, err := WriteIndex(&bytes.Buffer{}, "example.com/a/b:v1", imgs); !errors.Is(err, ErrPlatforms) {
			t.Errorf("%s: %v; want ErrPlatforms", name, err)
		}
	}
	if _, err := WriteIndex(&bytes.Buffer{}, "example.com/a/b", platformImages()); !errors.Is(err, ErrInvalidName) {
		t.Errorf("a name without a tag: %v; want ErrInvalidName", err)
	}
}
