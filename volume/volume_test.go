package volume

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	utilstrings "k8s.io/utils/strings"
)

func TestValidatePluginName(t *testing.T) {
	good := []string{"kubernetes.io/empty-dir", "kubernetes.io/csi", "example.com/My_Plugin.v2", "local", "a", "a.b-c/x"}
	bad := []string{"", "/x", "x/", "Kubernetes.io/x", "a/b/c", "kubernetes.io~empty-dir", "a..b/x", "-a/x", "x/-y", "x/y_", "x/ y",
		strings.Repeat("a", 64), "p/" + strings.Repeat("b", 64), strings.Repeat("a", 254) + "/x", "x/y\x00", "./x", "../x", "x/.."}
	for _, n := range good {
		if err := ValidatePluginName(n); err != nil {
			t.Errorf("ValidatePluginName(%q) = %v; want nil", n, err)
		}
	}
	for _, n := range bad {
		err := ValidatePluginName(n)
		var ine *InvalidNameError
		if !errors.Is(err, ErrInvalidName) || !errors.As(err, &ine) || ine.Field != "plugin name" || ine.Value != n {
			t.Errorf("ValidatePluginName(%q) = %v; want *InvalidNameError for the plugin name", n, err)
		}
	}
}

func TestEscapePluginName(t *testing.T) {
	esc, err := EscapePluginName("kubernetes.io/empty-dir")
	if err != nil || esc != "kubernetes.io~empty-dir" {
		t.Fatalf("EscapePluginName = %q, %v", esc, err)
	}
	back, err := UnescapePluginName(esc)
	if err != nil || back != "kubernetes.io/empty-dir" {
		t.Fatalf("UnescapePluginName(%q) = %q, %v", esc, back, err)
	}
	for _, dir := range []string{"a~b~c", "x/y", "", "~x", "..", "kubernetes.io~"} {
		if _, err := UnescapePluginName(dir); !errors.Is(err, ErrInvalidName) {
			t.Errorf("UnescapePluginName(%q) = %v; want ErrInvalidName", dir, err)
		}
	}
}

func TestValidatePodUIDAndVolumeNames(t *testing.T) {
	for _, c := range []struct {
		fn    func(string) error
		field string
		good  []string
		bad   []string
	}{
		{ValidatePodUID, "pod UID", []string{"8a3f0c52-1d4e-4b7a-9c21-6e5d2f1a7b90", "abc", "UPPER_ok.x"},
			[]string{"", ".", "..", "a/b", "/", "a\x00", strings.Repeat("u", MaxPodUIDLen+1)}},
		{ValidateVolumeName, "volume name", []string{"cache", "a", "vol-1", strings.Repeat("a", 63)},
			[]string{"", "Cache", "-a", "a-", "a_b", "a.b", "a/b", "..", strings.Repeat("a", 64)}},
		{ValidateVolumeDirName, "volume directory name", []string{"cache", "pvc-1.x", "Weird Name", strings.Repeat("a", 255)},
			[]string{"", ".", "..", "a/b", "a\x00", strings.Repeat("a", 256)}},
		{ValidateContainerName, "container name", []string{"app", "side-car"}, []string{"", "App", "a/b"}},
	} {
		for _, g := range c.good {
			if err := c.fn(g); err != nil {
				t.Errorf("%s %q: %v; want valid", c.field, g, err)
			}
		}
		for _, b := range c.bad {
			err := c.fn(b)
			var ine *InvalidNameError
			if !errors.As(err, &ine) || ine.Field != c.field || ine.Value != b || !strings.Contains(err.Error(), c.field) {
				t.Errorf("%s %q: %v; want *InvalidNameError naming the field and value", c.field, b, err)
			}
		}
	}
}

func TestNewLayout(t *testing.T) {
	for _, root := range []string{"", "relative", "/", "/var/lib/kubelet/", "/var//lib", "/a/../b", "/a\x00"} {
		if _, err := NewLayout(root); !errors.Is(err, ErrInvalidRoot) {
			t.Errorf("NewLayout(%q) = %v; want ErrInvalidRoot", root, err)
		}
	}
	if _, err := (Layout{}).VolumeDir("uid", "kubernetes.io/empty-dir", "v"); !errors.Is(err, ErrInvalidRoot) {
		t.Errorf("zero Layout built a path: %v", err)
	}
}

func TestLayoutPaths(t *testing.T) {
	l, err := NewLayout(DefaultRoot)
	if err != nil {
		t.Fatal(err)
	}
	const uid, plugin = "8a3f0c52", "kubernetes.io/empty-dir"
	for _, c := range []struct {
		got  func() (string, error)
		want string
	}{
		{func() (string, error) { return l.PodDir(uid) }, "/var/lib/kubelet/pods/8a3f0c52"},
		{func() (string, error) { return l.VolumeDir(uid, plugin, "cache") }, "/var/lib/kubelet/pods/8a3f0c52/volumes/kubernetes.io~empty-dir/cache"},
		{func() (string, error) { return l.PluginVolumeDir(uid, plugin, "cache") }, "/var/lib/kubelet/pods/8a3f0c52/plugins/kubernetes.io~empty-dir/cache"},
		{func() (string, error) { return l.SubpathDir(uid, "cache", "app", 2) }, "/var/lib/kubelet/pods/8a3f0c52/volume-subpaths/cache/app/2"},
	} {
		got, err := c.got()
		if err != nil || got != c.want {
			t.Errorf("got %q, %v; want %q", got, err, c.want)
		}
	}
	// Escape attempts are refused, naming the field.
	for _, c := range []struct{ uid, plugin, vol string }{
		{"..", plugin, "v"}, {"a/../../..", plugin, "v"}, {uid, "../x", "v"}, {uid, plugin, ".."}, {uid, plugin, "../../etc"}, {"", plugin, "v"}, {uid, plugin, ""},
	} {
		if p, err := l.VolumeDir(c.uid, c.plugin, c.vol); !errors.Is(err, ErrInvalidName) {
			t.Errorf("VolumeDir(%q, %q, %q) = %q, %v; want ErrInvalidName", c.uid, c.plugin, c.vol, p, err)
		}
	}
	if _, err := l.SubpathDir(uid, "v", "app", -1); !errors.Is(err, ErrInvalidName) {
		t.Errorf("negative subpath index accepted: %v", err)
	}
}

func TestParseVolumePath(t *testing.T) {
	l, _ := NewLayout("/data/kubelet")
	vp, err := l.ParseVolumePath("/data/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/cache")
	if err != nil || vp != (VolumePath{PodUID: "u1", Plugin: "kubernetes.io/empty-dir", Volume: "cache"}) {
		t.Fatalf("ParseVolumePath = %+v, %v", vp, err)
	}
	for _, p := range []string{
		"/data/kubelet/pods/u1/volumes/kubernetes.io~empty-dir",
		"/data/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/cache/extra",
		"/data/kubelet/pods/u1/plugins/kubernetes.io~empty-dir/cache",
		"/data/kubelet/pods/../volumes/kubernetes.io~empty-dir/cache",
		"/data/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/..",
		"/data/kubelet/pods/u1/volumes/a~b~c/cache",
		"/other/pods/u1/volumes/kubernetes.io~empty-dir/cache",
		"/data/kubelet/pods/u1/volumes//cache",
		"/data/kubelet/pods//u1/volumes/x/cache",
	} {
		if vp, err := l.ParseVolumePath(p); !errors.Is(err, ErrNotVolumePath) {
			t.Errorf("ParseVolumePath(%q) = %+v, %v; want ErrNotVolumePath", p, vp, err)
		}
	}
	root, vp, err := ParseVolumePathAnyRoot("/srv/pods/k/pods/u2/volumes/kubernetes.io~empty-dir/v")
	if err != nil || root.Root() != "/srv/pods/k" || vp.PodUID != "u2" || vp.Volume != "v" {
		t.Errorf("ParseVolumePathAnyRoot = %v, %+v, %v", root.Root(), vp, err)
	}
	for _, p := range []string{"relative/pods/u/volumes/p/v", "/pods/u/volumes/p/v", "/x/pods/u/volumes/p", "/x/pods/u/volumes/p/v/"} {
		if _, _, err := ParseVolumePathAnyRoot(p); !errors.Is(err, ErrNotVolumePath) {
			t.Errorf("ParseVolumePathAnyRoot(%q) = %v; want ErrNotVolumePath", p, err)
		}
	}
}

func FuzzPluginName(f *testing.F) {
	for _, s := range []string{"kubernetes.io/empty-dir", "a~b", "x/y/z", "", "a.b/c_d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		esc, err := EscapePluginName(name)
		if err != nil {
			return
		}
		if strings.ContainsAny(esc, "/\x00") || esc == "." || esc == ".." {
			t.Fatalf("escaped %q to unsafe element %q", name, esc)
		}
		back, err := UnescapePluginName(esc)
		if err != nil || back != name {
			t.Fatalf("round trip %q → %q → %q, %v", name, esc, back, err)
		}
	})
}

// FuzzLayout: whatever the inputs, a path the layout builds lies strictly
// under the root and parses back to the same parts.
func FuzzLayout(f *testing.F) {
	f.Add("uid", "kubernetes.io/empty-dir", "cache")
	f.Add("..", "x", "y")
	f.Add("u", "a/b", "../..")
	f.Fuzz(func(t *testing.T, uid, plugin, vol string) {
		l, _ := NewLayout("/var/lib/kubelet")
		p, err := l.VolumeDir(uid, plugin, vol)
		if err != nil {
			return
		}
		if !strings.HasPrefix(p, "/var/lib/kubelet/pods/") || filepath.Clean(p) != p {
			t.Fatalf("VolumeDir(%q, %q, %q) = %q escapes or is unclean", uid, plugin, vol, p)
		}
		vp, err := l.ParseVolumePath(p)
		if err != nil || vp != (VolumePath{uid, plugin, vol}) {
			t.Fatalf("ParseVolumePath(%q) = %+v, %v; want %q %q %q", p, vp, err, uid, plugin, vol)
		}
	})
}

func FuzzParseVolumePath(f *testing.F) {
	f.Add("/var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/v")
	f.Add("/var/lib/kubelet/pods/../volumes/x/v")
	f.Fuzz(func(t *testing.T, p string) {
		l, vp, err := ParseVolumePathAnyRoot(p)
		if err != nil {
			return
		}
		again, err := l.VolumeDir(vp.PodUID, vp.Plugin, vp.Volume)
		if err != nil || again != p {
			t.Fatalf("%q parsed to %+v under %s, rebuilt as %q, %v", p, vp, l.Root(), again, err)
		}
	})
}

// An unclean path is refused with what makes it unclean, in the terms of
// what was typed.
func TestUncleanSaysWhy(t *testing.T) {
	const vol = "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/cache"
	for _, tc := range []struct{ path, why string }{
		{vol, ""},
		{"/", ""},
		{".", ""},
		{"", "is empty"},
		{vol + "/", "has a trailing '/'"},
		{vol + "//", "has a doubled '/', has a trailing '/'"},
		{vol + "/.", "has a trailing '/.'"},
		{vol + "/./", "has a trailing '/', has a trailing '/.'"},
		{"/var/lib//kubelet/pods/u1/volumes/kubernetes.io~empty-dir/cache", "has a doubled '/'"},
		{"/var/lib/./kubelet/pods/u1/volumes/kubernetes.io~empty-dir/cache", "contains a '.' element"},
		{"./a", "contains a '.' element"},
		{"/a/../b", "contains a '..' element"},
		{"/a//./b/.", "has a doubled '/', has a trailing '/.', contains a '.' element"},
	} {
		if got := unclean(tc.path); got != tc.why {
			t.Errorf("unclean(%q) = %q; want %q", tc.path, got, tc.why)
		}
	}
	for _, tc := range []struct{ path, want string }{
		{vol + "/.", `is not clean: has a trailing '/.'`},
		{"/var/lib//kubelet/pods/u1/volumes/kubernetes.io~empty-dir/cache", `is not clean: has a doubled '/'`},
		{"relative/pods/u1/volumes/kubernetes.io~empty-dir/cache", `is not absolute`},
	} {
		if _, _, err := ParseVolumePathAnyRoot(tc.path); !errors.Is(err, ErrNotVolumePath) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseVolumePathAnyRoot(%q) = %v; want ErrNotVolumePath saying %q", tc.path, err, tc.want)
		}
	}
	if _, err := NewLayout("/var/lib/kubelet/"); !errors.Is(err, ErrInvalidRoot) || !strings.Contains(err.Error(), `not clean: has a trailing '/' (use "/var/lib/kubelet")`) {
		t.Errorf(`NewLayout("/var/lib/kubelet/") = %v; want ErrInvalidRoot saying what is unclean`, err)
	}
}

func TestEmptyDirSourceMode(t *testing.T) {
	m := func(v uint32) *uint32 { return &v }
	for _, tc := range []struct {
		src  EmptyDirSource
		want uint32
	}{
		{EmptyDirSource{}, 0o777},
		{EmptyDirSource{StickyBit: true}, 0o1777},
		{EmptyDirSource{Mode: m(0o750)}, 0o750},
		{EmptyDirSource{Mode: m(0o750), StickyBit: true}, 0o1750},
		{EmptyDirSource{Mode: m(0o1777)}, 0o1777},
		{EmptyDirSource{Mode: m(0)}, 0},
	} {
		if got := tc.src.EffectiveMode(); got != tc.want {
			t.Errorf("%+v: EffectiveMode = %#o; want %#o", tc.src, got, tc.want)
		}
		s := Spec{Name: "v", EmptyDir: &tc.src}
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: Validate = %v", tc.src, err)
		}
	}
	for _, bad := range []uint32{0o2000, 0o4000, 0o2777, 0o10000} {
		s := Spec{Name: "v", EmptyDir: &EmptyDirSource{Mode: m(bad)}}
		if err := s.Validate(); err == nil {
			t.Errorf("Validate with mode %#o = nil; want an error", bad)
		}
	}
}

// TestInTreePluginNames checks the in-tree plugins' directory names that
// EscapePluginName and UnescapePluginName return without escaping
// against the escaping itself.
func TestInTreePluginNames(t *testing.T) {
	for _, name := range []string{"kubernetes.io/empty-dir", "kubernetes.io/projected", "kubernetes.io/secret",
		"kubernetes.io/configmap", "kubernetes.io/csi", "kubernetes.io/downward-api"} {
		dir, ok := inTreePlugin(name, false)
		if !ok || dir != utilstrings.EscapeQualifiedName(name) {
			t.Errorf("inTreePlugin(%q, false) = %q, %v; want %q", name, dir, ok, utilstrings.EscapeQualifiedName(name))
		}
		if back, ok := inTreePlugin(dir, true); !ok || back != name {
			t.Errorf("inTreePlugin(%q, true) = %q, %v; want %q", dir, back, ok, name)
		}
		if err := ValidatePluginName(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, ok := inTreePlugin("kubernetes.io~empty-dir", false); ok {
		t.Error("a directory name taken for a plugin name")
	}
}
