package volume

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

type fakePlugin struct {
	name     string
	supports func(*Spec) bool
}

func (p fakePlugin) Name() string                                   { return p.name }
func (p fakePlugin) CanSupport(s *Spec) bool                        { return p.supports(s) }
func (p fakePlugin) NewMounter(*Spec, *Pod) (Mounter, error)        { return nil, errors.New("unused") }
func (p fakePlugin) NewUnmounter(string, string) (Unmounter, error) { return nil, errors.New("unused") }

func TestRegistry(t *testing.T) {
	emptyDir := fakePlugin{"kubernetes.io/empty-dir", func(s *Spec) bool { return s.EmptyDir != nil }}
	other := fakePlugin{"example.com/other", func(s *Spec) bool { return s.Other != nil }}
	greedy := fakePlugin{"example.com/greedy", func(s *Spec) bool { return s.Other == "both" }}
	r, err := NewRegistry(emptyDir, other, greedy)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Register(fakePlugin{name: "kubernetes.io/empty-dir"}); !errors.Is(err, ErrDuplicatePlugin) {
		t.Errorf("duplicate Register = %v; want ErrDuplicatePlugin", err)
	}
	if err := r.Register(fakePlugin{name: "bad~name"}); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Register(bad~name) = %v; want ErrInvalidName", err)
	}
	if err := r.Register(nil); err == nil {
		t.Error("Register(nil) succeeded")
	}
	if p, err := r.FindByName("kubernetes.io/empty-dir"); err != nil || p.Name() != "kubernetes.io/empty-dir" {
		t.Errorf("FindByName = %v, %v", p, err)
	}
	if _, err := r.FindByName("nope"); !errors.Is(err, ErrPluginNotFound) {
		t.Errorf("FindByName(nope) = %v; want ErrPluginNotFound", err)
	}
	if p, err := r.FindBySpec(&Spec{Name: "v", EmptyDir: &EmptyDirSource{}}); err != nil || p.Name() != "kubernetes.io/empty-dir" {
		t.Errorf("FindBySpec(emptyDir) = %v, %v", p, err)
	}
	if _, err := r.FindBySpec(&Spec{Name: "v"}); !errors.Is(err, ErrPluginNotFound) {
		t.Errorf("FindBySpec(no source) = %v; want ErrPluginNotFound", err)
	}
	_, err = r.FindBySpec(&Spec{Name: "v", Other: "both"})
	if !errors.Is(err, ErrMultiplePlugins) || !strings.Contains(err.Error(), "example.com/greedy, example.com/other") {
		t.Errorf("FindBySpec(ambiguous) = %v; want ErrMultiplePlugins naming both", err)
	}
	if got := strings.Join(r.Names(), ","); got != "example.com/greedy,example.com/other,kubernetes.io/empty-dir" {
		t.Errorf("Names = %s", got)
	}
}

func TestOperationError(t *testing.T) {
	cause := context.DeadlineExceeded
	err := fmt.Errorf("wrapped: %w", &OperationError{Kind: Uncertain, Op: "TearDown", Path: "/v", Err: cause})
	if KindOf(err) != Uncertain || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("KindOf = %s, Is(cause) = %v", KindOf(err), errors.Is(err, cause))
	}
	var oe *OperationError
	if !errors.As(err, &oe) || oe.Op != "TearDown" || !strings.Contains(err.Error(), "uncertain") {
		t.Errorf("errors.As = %v, %v", oe, err)
	}
	if KindOf(errors.New("plain")) != Final {
		t.Error("a plain error is not final")
	}
}

func TestPodValidate(t *testing.T) {
	ok := &Pod{UID: "u", Volumes: []Spec{{Name: "a", EmptyDir: &EmptyDirSource{}}, {Name: "b", Other: 1}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if ok.Volume("b") == nil || ok.Volume("zz") != nil {
		t.Error("Volume lookup wrong")
	}
	for name, p := range map[string]*Pod{
		"bad uid":       {UID: "a/b"},
		"dup volume":    {UID: "u", Volumes: []Spec{{Name: "a", Other: 1}, {Name: "a", Other: 1}}},
		"bad volume":    {UID: "u", Volumes: []Spec{{Name: "A", Other: 1}}},
		"no source":     {UID: "u", Volumes: []Spec{{Name: "a"}}},
		"negative size": {UID: "u", Volumes: []Spec{{Name: "a", EmptyDir: &EmptyDirSource{SizeLimit: -1}}}},
		"nil":           nil,
	} {
		if err := p.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil", name)
		}
	}
	if !StorageMedium("HugePages-2Mi").IsHugePages() || StorageMediumMemory.IsHugePages() {
		t.Error("IsHugePages wrong")
	}
	if PodVolumeName("kubernetes.io/empty-dir", "u", "v") != "kubernetes.io/empty-dir/u-v" {
		t.Error("PodVolumeName wrong")
	}
}
