package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Media types of what Write produces.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// Annotations Write puts on the manifest's descriptor in index.json.
const (
	// AnnotationImageName is the full reference containerd names the
	// image by on import.
	AnnotationImageName = "io.containerd.image.name"
	// AnnotationRefName is the reference's tag, as docker save and
	// BuildKit write it in an image layout.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// layoutVersion is the content of the oci-layout file.
const layoutVersion = `{"imageLayoutVersion":"1.0.0"}`

// Epoch is the timestamp of an Image whose Created is zero.
var Epoch = time.Unix(0, 0).UTC()

// EntryType is what an Entry is.
type EntryType int

const (
	Dir     EntryType = iota + 1 // a directory
	File                         // a regular file
	Symlink                      // a symbolic link
)

func (t EntryType) String() string {
	switch t {
	case Dir:
		return "dir"
	case File:
		return "file"
	case Symlink:
		return "symlink"
	}
	return fmt.Sprintf("EntryType(%d)", int(t))
}

// Entry is one file system object of the layer.
type Entry struct {
	// Path is slash-separated, in the image; a leading "/" is optional.
	// It may not be empty or "/", nor hold a ".." element.
	Path string
	Type EntryType
	// Mode is the permission bits, plus fs.ModeSticky, fs.ModeSetuid and
	// fs.ModeSetgid; other type bits are ignored. Symlinks are 0777.
	Mode   fs.FileMode
	Data   []byte // File only
	Target string // Symlink only: the link's target, as written
}

// FileFrom is an Entry for the regular file at hostPath, read now, at
// imagePath with mode (not the host file's mode).
func FileFrom(hostPath, imagePath string, mode fs.FileMode) (Entry, error) {
	data, err := os.ReadFile(hostPath)
	if err != nil {
		return Entry{}, err
	}
	return Entry{Path: imagePath, Type: File, Mode: mode, Data: data}, nil
}

// Platform is the platform an image runs on.
type Platform struct {
	Architecture string `json:"architecture"` // GOARCH spelling: amd64, arm64
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
}

// Config is the process an image runs and its labels (the config's
// "config" object, with Docker's field names as the OCI spec keeps them).
type Config struct {
	User       string            `json:"User,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

// Image is a single-layer image.
type Image struct {
	// Name is the full reference, e.g. "ghcr.io/nodevol/nodevol:v1.2.3":
	// index.json carries it as AnnotationImageName and its tag ("v1.2.3")
	// as AnnotationRefName.
	Name string
	// Platform; a zero Architecture is runtime.GOARCH, a zero OS "linux".
	Platform Platform
	// Created is every timestamp in the image, truncated to seconds; zero
	// is Epoch.
	Created time.Time
	Config  Config
	// Annotations are the manifest's.
	Annotations map[string]string
	Entries     []Entry
}

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Manifest is an image manifest.
type Manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        Descriptor        `json:"config"`
	Layers        []Descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// ImageConfig is an image's configuration blob.
type ImageConfig struct {
	Created string `json:"created"`
	Platform
	Config Config `json:"config"`
	RootFS RootFS `json:"rootfs"`
}

// RootFS lists the digests of the uncompressed layers.
type RootFS struct {
	Type    string   `json:"type"` // "layers"
	DiffIDs []string `json:"diff_ids"`
}

// index is index.json.
type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Errors, matched with errors.Is; an *EntryError or *BlobError says where.
var (
	ErrInvalidPath    = errors.New("invalid path: empty, the root, or with a \"..\" or NUL")
	ErrDuplicate      = errors.New("path given twice")
	ErrNotDir         = errors.New("a parent is not a directory")
	ErrInvalidEntry   = errors.New("invalid entry")
	ErrInvalidName    = errors.New("invalid image name: want a reference with a tag, e.g. example.com/a/b:v1")
	ErrInvalidLayout  = errors.New("not a single-image OCI layout")
	ErrDigestMismatch = errors.New("content does not match its digest or size")
	ErrMissingBlob    = errors.New("blob not in the layout")
)

// EntryError is an Entry that cannot be written.
type EntryError struct {
	Path string
	Err  error
}

func (e *EntryError) Error() string { return fmt.Sprintf("ociimage: entry %q: %v", e.Path, e.Err) }
func (e *EntryError) Unwrap() error { return e.Err }

// BlobError is a blob of a layout that does not verify.
type BlobError struct {
	Digest string
	Err    error
}

func (e *BlobError) Error() string { return fmt.Sprintf("ociimage: blob %s: %v", e.Digest, e.Err) }
func (e *BlobError) Unwrap() error { return e.Err }

// Digest is the sha256 digest of b, "sha256:<hex>".
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (img *Image) platform() Platform {
	p := img.Platform
	if p.Architecture == "" {
		p.Architecture = runtime.GOARCH
	}
	if p.OS == "" {
		p.OS = "linux"
	}
	return p
}

func (img *Image) created() time.Time {
	if img.Created.IsZero() {
		return Epoch
	}
	return img.Created.UTC().Truncate(time.Second)
}

// tag is the tag of a reference "host/path:tag" (a digest reference has
// none).
func tag(name string) (string, error) {
	i := strings.LastIndex(name, ":")
	if i < 0 || strings.Contains(name[i:], "/") || strings.Contains(name, "@") || i == len(name)-1 || i == 0 {
		return "", fmt.Errorf("ociimage: %q: %w", name, ErrInvalidName)
	}
	return name[i+1:], nil
}

// cleanPath is p as a tar name without a leading "/", or ErrInvalidPath.
func cleanPath(p string) (string, error) {
	rel := strings.TrimPrefix(p, "/")
	if rel == "" || strings.ContainsRune(rel, 0) {
		return "", ErrInvalidPath
	}
	for _, elem := range strings.Split(rel, "/") {
		if elem == ".." {
			return "", ErrInvalidPath
		}
	}
	rel = path.Clean(rel)
	if rel == "." || rel == "/" {
		return "", ErrInvalidPath
	}
	return rel, nil
}

// tarMode is m's permission and special bits as a tar header's mode.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// Layer is the uncompressed tar of entries: sorted by path, each missing
// parent directory added with mode 0755, every timestamp mtime, every
// owner uid and gid 0.
func Layer(entries []Entry, mtime time.Time) ([]byte, error) {
	byPath := make(map[string]Entry, len(entries))
	for _, e := range entries {
		p, err := cleanPath(e.Path)
		if err != nil {
			return nil, &EntryError{Path: e.Path, Err: err}
		}
		switch e.Type {
		case Dir, Symlink:
			if len(e.Data) > 0 {
				return nil, &EntryError{Path: e.Path, Err: fmt.Errorf("%w: a %v with data", ErrInvalidEntry, e.Type)}
			}
		case File:
		default:
			return nil, &EntryError{Path: e.Path, Err: fmt.Errorf("%w: type %v", ErrInvalidEntry, e.Type)}
		}
		if (e.Type == Symlink) != (e.Target != "") {
			return nil, &EntryError{Path: e.Path, Err: fmt.Errorf("%w: a %v with target %q", ErrInvalidEntry, e.Type, e.Target)}
		}
		if _, dup := byPath[p]; dup {
			return nil, &EntryError{Path: e.Path, Err: ErrDuplicate}
		}
		byPath[p] = e
	}
	for p := range byPath {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			parent, ok := byPath[d]
			if !ok {
				byPath[d] = Entry{Type: Dir, Mode: 0o755}
				continue
			}
			if parent.Type != Dir {
				return nil, &EntryError{Path: byPath[p].Path, Err: fmt.Errorf("%w: %s is a %v", ErrNotDir, d, parent.Type)}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	// A prefix sorts before its extensions: each directory comes before
	// what it holds.
	sort.Strings(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := byPath[p]
		h := &tar.Header{Name: p, Mode: tarMode(e.Mode), ModTime: mtime}
		switch e.Type {
		case Dir:
			h.Typeflag, h.Name = tar.TypeDir, p+"/"
		case File:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.Data))
		case Symlink:
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.Target, 0o777
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, &EntryError{Path: e.Path, Err: err}
		}
		if _, err := tw.Write(e.Data); err != nil {
			return nil, &EntryError{Path: e.Path, Err: err}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Write writes img to w as an OCI image layout tarball and returns the
// descriptor of its manifest, as index.json lists it; its Digest is the
// image's digest.
func Write(w io.Writer, img *Image) (Descriptor, error) {
	refTag, err := tag(img.Name)
	if err != nil {
		return Descriptor{}, err
	}
	layer, err := Layer(img.Entries, img.created())
	if err != nil {
		return Descriptor{}, err
	}
	return writeLayout(w, img, refTag, layer)
}

// writeLayout is Write with the layer given: tests use it to write
// layouts whose layer Layer would refuse.
func writeLayout(w io.Writer, img *Image, refTag string, layer []byte) (Descriptor, error) {
	b, err := imageBlobs(img, layer)
	if err != nil {
		return Descriptor{}, err
	}
	desc := b.desc
	desc.Annotations = map[string]string{AnnotationImageName: img.Name, AnnotationRefName: refTag}
	if err := writeTar(w, img.created(), desc, b.blobs...); err != nil {
		return Descriptor{}, err
	}
	return desc, nil
}

// blobsOf is one image's blobs (layer, config, manifest) and its
// manifest's descriptor, with its platform and without annotations.
type blobsOf struct {
	blobs [][]byte
	desc  Descriptor
}

func imageBlobs(img *Image, layer []byte) (blobsOf, error) {
	created := img.created()
	platform := img.platform()
	config, err := json.Marshal(ImageConfig{
		Created:  created.Format(time.RFC3339),
		Platform: platform,
		Config:   img.Config,
		RootFS:   RootFS{Type: "layers", DiffIDs: []string{Digest(layer)}},
	})
	if err != nil {
		return blobsOf{}, fmt.Errorf("ociimage: config: %w", err)
	}
	manifest, err := json.Marshal(Manifest{
		SchemaVersion: 2,
		MediaType:     MediaTypeManifest,
		Config:        Descriptor{MediaType: MediaTypeConfig, Digest: Digest(config), Size: int64(len(config))},
		Layers:        []Descriptor{{MediaType: MediaTypeLayer, Digest: Digest(layer), Size: int64(len(layer))}},
		Annotations:   img.Annotations,
	})
	if err != nil {
		return blobsOf{}, fmt.Errorf("ociimage: manifest: %w", err)
	}
	return blobsOf{
		blobs: [][]byte{layer, config, manifest},
		desc:  Descriptor{MediaType: MediaTypeManifest, Digest: Digest(manifest), Size: int64(len(manifest)), Platform: &platform},
	}, nil
}

// writeTar writes the layout: oci-layout, an index.json listing top, and
// the blobs, each once, sorted by digest, every timestamp created.
func writeTar(w io.Writer, created time.Time, top Descriptor, blobs ...[]byte) error {
	idx, err := json.Marshal(index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{top}})
	if err != nil {
		return fmt.Errorf("ociimage: index: %w", err)
	}
	byDigest := map[string][]byte{}
	for _, b := range blobs {
		byDigest[Digest(b)] = b
	}
	digests := make([]string, 0, len(byDigest))
	for d := range byDigest {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	tw := tar.NewWriter(w)
	put := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: created}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := put("oci-layout", []byte(layoutVersion)); err != nil {
		return fmt.Errorf("ociimage: writing: %w", err)
	}
	if err := put("index.json", idx); err != nil {
		return fmt.Errorf("ociimage: writing: %w", err)
	}
	for _, d := range digests {
		if err := put(blobPath(d), byDigest[d]); err != nil {
			return fmt.Errorf("ociimage: writing: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("ociimage: writing: %w", err)
	}
	return nil
}

// ErrPlatforms is matched by WriteIndex's error for images that are not
// one per platform, or do not share a Created time.
var ErrPlatforms = errors.New("want one image per platform, at least one, all created at the same time")

// WriteIndex writes imgs, one per platform, as one multi-platform image
// in an OCI image layout tarball: index.json lists one image index, named
// name (as Write names an image), and that index lists each image's
// manifest with its platform, in the order of imgs. The index's digest is
// the image's digest: the one a registry serves for name, from which a
// node pulls the manifest of its own platform. Image.Name is ignored.
// Reproducible as Write is.
func WriteIndex(w io.Writer, name string, imgs []*Image) (Descriptor, error) {
	refTag, err := tag(name)
	if err != nil {
		return Descriptor{}, err
	}
	if len(imgs) == 0 {
		return Descriptor{}, fmt.Errorf("ociimage: no images: %w", ErrPlatforms)
	}
	var blobs [][]byte
	var manifests []Descriptor
	seen := map[Platform]bool{}
	for _, img := range imgs {
		p := img.platform()
		if seen[p] || !img.created().Equal(imgs[0].created()) {
			return Descriptor{}, fmt.Errorf("ociimage: %s/%s: %w", p.OS, p.Architecture, ErrPlatforms)
		}
		seen[p] = true
		layer, err := Layer(img.Entries, img.created())
		if err != nil {
			return Descriptor{}, err
		}
		b, err := imageBlobs(img, layer)
		if err != nil {
			return Descriptor{}, err
		}
		blobs = append(blobs, b.blobs...)
		manifests = append(manifests, b.desc)
	}
	ix, err := json.Marshal(index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: manifests})
	if err != nil {
		return Descriptor{}, fmt.Errorf("ociimage: image index: %w", err)
	}
	blobs = append(blobs, ix)
	desc := Descriptor{
		MediaType:   MediaTypeIndex,
		Digest:      Digest(ix),
		Size:        int64(len(ix)),
		Annotations: map[string]string{AnnotationImageName: name, AnnotationRefName: refTag},
	}
	if err := writeTar(w, imgs[0].created(), desc, blobs...); err != nil {
		return Descriptor{}, err
	}
	return desc, nil
}

// WriteIndexFile is WriteIndex to the file name, atomically, as WriteFile.
func WriteIndexFile(name, ref string, imgs []*Image) (Descriptor, error) {
	return writeFileAtomic(name, func(w io.Writer) (Descriptor, error) { return WriteIndex(w, ref, imgs) })
}

// WriteFile writes img to the file name, atomically: a reader sees the
// old file or the whole new one. The file is mode 0644.
func WriteFile(name string, img *Image) (Descriptor, error) {
	return writeFileAtomic(name, func(w io.Writer) (Descriptor, error) { return Write(w, img) })
}

// writeFileAtomic writes the file name with write, through a temporary
// file renamed over it, mode 0644.
func writeFileAtomic(name string, write func(io.Writer) (Descriptor, error)) (Descriptor, error) {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return Descriptor{}, err
	}
	tmp := f.Name()
	keep := false
	defer func() {
		if !keep {
			f.Close()
			os.Remove(tmp)
		}
	}()
	desc, err := write(f)
	if err != nil {
		return Descriptor{}, err
	}
	if err := f.Chmod(0o644); err != nil {
		return Descriptor{}, err
	}
	if err := f.Sync(); err != nil {
		return Descriptor{}, err
	}
	if err := f.Close(); err != nil {
		return Descriptor{}, err
	}
	if err := os.Rename(tmp, name); err != nil {
		return Descriptor{}, err
	}
	keep = true
	return desc, nil
}

func blobPath(digest string) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
}

// Layout is a single-image layout as Inspect read it, every digest checked.
type Layout struct {
	Index    Descriptor // the manifest's entry in index.json
	Manifest Manifest
	Config   ImageConfig
	Layer    []LayerFile // in the layer's order
}

// LayerFile is one entry of the layer.
type LayerFile struct {
	Header *tar.Header
	Data   []byte
}

// Inspect reads an OCI image layout tarball holding one image (as Write
// writes it) and checks it as an importer would: the layout version, one
// manifest in index.json, every blob's digest and size, and the config's
// diff_id against the uncompressed layer, and every layer entry as
// Layer writes them (see checkLayerEntry): no path that escapes the root.
func Inspect(r io.Reader) (*Layout, error) {
	top, blob, err := readLayout(r, MediaTypeManifest)
	if err != nil {
		return nil, err
	}
	return inspectImage(top, blob)
}

// IndexLayout is a multi-platform layout as InspectIndex read it, every
// digest checked.
type IndexLayout struct {
	Index  Descriptor // the image index's entry in index.json
	Images []*Layout  // each Layout's Index is its entry in the image index
}

// InspectIndex reads an OCI image layout tarball holding one
// multi-platform image (as WriteIndex writes it) and checks it as Inspect
// checks one image, and each image of it, whose platforms must be
// distinct and the ones their configs name.
func InspectIndex(r io.Reader) (*IndexLayout, error) {
	top, blob, err := readLayout(r, MediaTypeIndex)
	if err != nil {
		return nil, err
	}
	ib, err := blob(top)
	if err != nil {
		return nil, err
	}
	var ix index
	if err := json.Unmarshal(ib, &ix); err != nil {
		return nil, fmt.Errorf("ociimage: image index: %w: %w", ErrInvalidLayout, err)
	}
	if ix.SchemaVersion != 2 || ix.MediaType != MediaTypeIndex || len(ix.Manifests) == 0 {
		return nil, fmt.Errorf("ociimage: image index %s: %w", ib, ErrInvalidLayout)
	}
	l := &IndexLayout{Index: top}
	seen := map[Platform]bool{}
	for _, d := range ix.Manifests {
		if d.MediaType != MediaTypeManifest || d.Platform == nil || seen[*d.Platform] {
			return nil, fmt.Errorf("ociimage: image index entry %+v: want one image manifest per platform: %w", d, ErrInvalidLayout)
		}
		seen[*d.Platform] = true
		img, err := inspectImage(d, blob)
		if err != nil {
			return nil, err
		}
		if img.Config.Platform != *d.Platform {
			return nil, fmt.Errorf("ociimage: the image index says %+v, the config %+v: %w", *d.Platform, img.Config.Platform, ErrInvalidLayout)
		}
		l.Images = append(l.Images, img)
	}
	return l, nil
}

// InspectIndexFile is InspectIndex of the file name.
func InspectIndexFile(name string) (*IndexLayout, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return InspectIndex(f)
}

// readLayout reads a layout tarball whose index.json lists one entry of
// mediaType, checks every blob's digest, and returns that entry and a
// lookup of blobs by descriptor (checking size and digest).
func readLayout(r io.Reader, mediaType string) (Descriptor, func(Descriptor) ([]byte, error), error) {
	files, err := readTar(r)
	if err != nil {
		return Descriptor{}, nil, fmt.Errorf("ociimage: reading layout: %w", err)
	}
	if got := string(files["oci-layout"]); got != layoutVersion {
		return Descriptor{}, nil, fmt.Errorf("ociimage: oci-layout is %q: %w", got, ErrInvalidLayout)
	}
	var idx index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		return Descriptor{}, nil, fmt.Errorf("ociimage: index.json: %w: %w", ErrInvalidLayout, err)
	}
	if idx.SchemaVersion != 2 || len(idx.Manifests) != 1 || idx.Manifests[0].MediaType != mediaType {
		return Descriptor{}, nil, fmt.Errorf("ociimage: index.json %s: %w", files["index.json"], ErrInvalidLayout)
	}
	blob := func(d Descriptor) ([]byte, error) {
		b, ok := files[blobPath(d.Digest)]
		if !ok {
			return nil, &BlobError{Digest: d.Digest, Err: ErrMissingBlob}
		}
		if Digest(b) != d.Digest || int64(len(b)) != d.Size {
			return nil, &BlobError{Digest: d.Digest, Err: fmt.Errorf("%w: %s, %d bytes; want size %d", ErrDigestMismatch, Digest(b), len(b), d.Size)}
		}
		return b, nil
	}
	for name, b := range files {
		if d, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && Digest(b) != "sha256:"+d {
			return Descriptor{}, nil, &BlobError{Digest: "sha256:" + d, Err: ErrDigestMismatch}
		}
	}
	return idx.Manifests[0], blob, nil
}

// inspectImage reads and checks the image whose manifest desc describes.
func inspectImage(desc Descriptor, blob func(Descriptor) ([]byte, error)) (*Layout, error) {
	l := &Layout{Index: desc}
	mb, err := blob(l.Index)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(mb, &l.Manifest); err != nil {
		return nil, fmt.Errorf("ociimage: manifest: %w: %w", ErrInvalidLayout, err)
	}
	if len(l.Manifest.Layers) != 1 || l.Manifest.Layers[0].MediaType != MediaTypeLayer || l.Manifest.Config.MediaType != MediaTypeConfig {
		return nil, fmt.Errorf("ociimage: manifest %s: want one uncompressed layer: %w", mb, ErrInvalidLayout)
	}
	cb, err := blob(l.Manifest.Config)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(cb, &l.Config); err != nil {
		return nil, fmt.Errorf("ociimage: config: %w: %w", ErrInvalidLayout, err)
	}
	lb, err := blob(l.Manifest.Layers[0])
	if err != nil {
		return nil, err
	}
	if len(l.Config.RootFS.DiffIDs) != 1 || l.Config.RootFS.DiffIDs[0] != Digest(lb) {
		return nil, fmt.Errorf("ociimage: config diff_ids %v, layer %s: %w", l.Config.RootFS.DiffIDs, Digest(lb), ErrDigestMismatch)
	}
	tr := tar.NewReader(bytes.NewReader(lb))
	seen := map[string]byte{} // clean path: typeflag
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("ociimage: layer: %w", err)
		}
		if err := checkLayerEntry(h, seen); err != nil {
			return nil, &EntryError{Path: h.Name, Err: err}
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("ociimage: layer %s: %w", h.Name, err)
		}
		l.Layer = append(l.Layer, LayerFile{Header: h, Data: data})
	}
	return l, nil
}

// checkLayerEntry checks a layer entry against what Layer writes: a
// directory, regular file or symlink, named by a clean relative path
// (a directory with a trailing "/"), given once, after its parent
// directory. An entry that escapes the root ("../", "/"), comes twice
// or lies under a symlink or file is refused, as are hard links and
// devices, which Layer never writes.
func checkLayerEntry(h *tar.Header, seen map[string]byte) error {
	name := h.Name
	switch h.Typeflag {
	case tar.TypeDir:
		var ok bool
		if name, ok = strings.CutSuffix(name, "/"); !ok {
			return fmt.Errorf("%w: a directory without a trailing /", ErrInvalidPath)
		}
	case tar.TypeReg, tar.TypeSymlink:
	default:
		return fmt.Errorf("%w: type %q", ErrInvalidEntry, h.Typeflag)
	}
	if p, err := cleanPath(name); err != nil || p != name {
		return ErrInvalidPath
	}
	if _, dup := seen[name]; dup {
		return ErrDuplicate
	}
	if d := path.Dir(name); d != "." && seen[d] != tar.TypeDir {
		return fmt.Errorf("%w: %s is not a directory listed before it", ErrNotDir, d)
	}
	seen[name] = h.Typeflag
	return nil
}

// InspectFile is Inspect of the file name.
func InspectFile(name string) (*Layout, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Inspect(f)
}

func readTar(r io.Reader) (map[string][]byte, error) {
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if _, dup := files[h.Name]; dup {
			return nil, fmt.Errorf("%s twice: %w", h.Name, ErrInvalidLayout)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[h.Name] = b
	}
}
