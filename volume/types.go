package volume

import "fmt"

// UniqueVolumeName identifies a volume on a node. For volumes that belong to
// one pod (emptyDir) it is "<plugin>/<podUID>-<volume>", as the kubelet
// builds it; for others "<plugin>/<volume>".
type UniqueVolumeName string

// PodVolumeName builds the unique name of a pod-scoped volume.
func PodVolumeName(plugin, podUID, volume string) UniqueVolumeName {
	return UniqueVolumeName(plugin + "/" + podUID + "-" + volume)
}

// EmptyDirSource is the emptyDir part of a volume spec.
type EmptyDirSource struct {
	Medium StorageMedium
	// SizeLimit in bytes; 0 means no limit.
	SizeLimit int64
	// StickyBit sets the sticky bit on the volume's directory (mode
	// 01777), so that users sharing it cannot delete each other's files.
	// With Mode it adds the sticky bit to Mode.
	StickyBit bool
	// Mode is the volume directory's mode (the EmptyDirVolumeMode
	// feature): permission bits and the sticky bit, 0 to 01777; anything
	// else fails Validate. nil means the default, 0777 (01777 with
	// StickyBit). For a Memory or HugePages volume it is the mode of the
	// mount's root, the directory the pod sees; emptydir makes a Memory
	// volume's root 01777 when it is nil, as the kubelet's tmpfs root is.
	Mode *uint32
}

// MaxEmptyDirMode is the largest EmptyDirSource.Mode: permission bits and
// the sticky bit.
const MaxEmptyDirMode = 0o1777

// EffectiveMode is the volume directory's mode the source asks for:
// Mode, or 0777 when it is nil, with the sticky bit added by StickyBit.
func (s *EmptyDirSource) EffectiveMode() uint32 {
	mode := uint32(0o777)
	if s.Mode != nil {
		mode = *s.Mode
	}
	if s.StickyBit {
		mode |= 0o1000
	}
	return mode
}

// validateMode checks Mode's range.
func (s *EmptyDirSource) validateMode() error {
	if s.Mode != nil && *s.Mode&^MaxEmptyDirMode != 0 {
		return fmt.Errorf("mode %#o is not a permission mode with an optional sticky bit (0 to 01777)", *s.Mode)
	}
	return nil
}

// Spec is a volume as a pod asks for it: a name and a source. Exactly one
// source is set; nodevol knows emptyDir, and other plugins recognise their
// sources through Other.
type Spec struct {
	Name     string
	EmptyDir *EmptyDirSource
	// Other carries a source for plugins nodevol does not define (tests,
	// embedders' own plugins). Plugins type-assert it.
	Other any
}

// Validate checks the spec's name and that it has a source.
func (s *Spec) Validate() error {
	if s == nil {
		return fmt.Errorf("nil volume spec")
	}
	if err := ValidateVolumeName(s.Name); err != nil {
		return err
	}
	if s.EmptyDir == nil && s.Other == nil {
		return fmt.Errorf("volume %q has no source", s.Name)
	}
	if s.EmptyDir != nil && s.EmptyDir.SizeLimit < 0 {
		return fmt.Errorf("volume %q: negative sizeLimit %d", s.Name, s.EmptyDir.SizeLimit)
	}
	if s.EmptyDir != nil {
		if err := s.EmptyDir.validateMode(); err != nil {
			return fmt.Errorf("volume %q: %w", s.Name, err)
		}
	}
	return nil
}

// Pod is what the volume code needs to know about a pod.
type Pod struct {
	UID       string
	Namespace string
	Name      string
	Volumes   []Spec
	// MemoryLimit is the pod's total memory limit in bytes; 0 when unlimited.
	MemoryLimit int64
	// HugePages maps a page size in bytes to the bytes of that page size
	// the pod requests (resources hugepages-2Mi: 1Gi → {2Mi: 1Gi}).
	HugePages map[int64]int64
}

// Validate checks the pod's UID and its volumes (valid, unique names).
func (p *Pod) Validate() error {
	if p == nil {
		return fmt.Errorf("nil pod")
	}
	if err := ValidatePodUID(p.UID); err != nil {
		return err
	}
	seen := make(map[string]bool, len(p.Volumes))
	for i := range p.Volumes {
		v := &p.Volumes[i]
		if err := v.Validate(); err != nil {
			return fmt.Errorf("pod %s: %w", p.UID, err)
		}
		if seen[v.Name] {
			return fmt.Errorf("pod %s: duplicate volume name %q", p.UID, v.Name)
		}
		seen[v.Name] = true
	}
	return nil
}

// Volume returns the pod's volume named name, or nil.
func (p *Pod) Volume(name string) *Spec {
	for i := range p.Volumes {
		if p.Volumes[i].Name == name {
			return &p.Volumes[i]
		}
	}
	return nil
}
