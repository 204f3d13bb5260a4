package emptydir

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/internal/base/friend"
	"github.com/nodevol/nodevol/internal/base/testhook"
	"github.com/nodevol/nodevol/volume"
)

// PluginName is the emptyDir plugin's name, as in the kubelet.
const PluginName = "kubernetes.io/empty-dir"

// Quotas is what the plugin needs from a project-quota implementation:
// *fsquota.Manager provides it. A nil Quotas means no quotas. Assign
// failing with an error matching errors.ErrUnsupported (a filesystem
// without project quotas) is not a SetUp failure: the volume simply has no
// project, and its usage is measured by walking.
//
// Every call gets the volume directory open (dirFd, the descriptor the
// plugin reached it by, one component at a time without following
// symlinks) and acts on that descriptor; path is what bookkeeping records
// and messages say, never a path to open: below the kubelet root a name
// resolved again could lead somewhere else.
type Quotas interface {
	// Assign gives the directory a project ID and (when limitBytes > 0 and
	// enforcing) a limit, and returns the project with the directory's
	// identity.
	Assign(dirFd int, path string, limitBytes int64) (fsquota.Project, error)
	// Clear releases the project Assign returned as p, recorded for path;
	// only a directory that is the one p identifies loses its project ID.
	Clear(dirFd int, path string, p fsquota.Project) error
	// Release releases what is recorded for path when its directory is
	// gone: fsFd is a directory on the same filesystem (-1: none left),
	// where limits are cleared; no project ID is taken off anything.
	Release(fsFd int, path string) error
	// Usage returns the bytes and inodes charged to the directory's
	// project, and which project that is.
	Usage(dirFd int, path string) (fsquota.Usage, error)
}

// Plugin is the kubernetes.io/empty-dir volume plugin.
type Plugin struct {
	host   volume.Host
	quotas Quotas
	// hook is called at SetUp's and TearDown's crash points (and passed
	// on to RemoveAll); set by this package's tests only.
	hook testhook.Hook
	// anyMountNamespace: see FromAnotherMountNamespace.
	anyMountNamespace bool
	// adoption is set by WithAdoption: this process's session and the
	// adoption counter; nil adopts nothing.
	adoption *adoption
}

var (
	_ volume.Plugin          = (*Plugin)(nil)
	_ volume.SpecConstructor = (*Plugin)(nil)
	_ volume.LayoutProvider  = (*Plugin)(nil)
	_ Quotas                 = (*fsquota.Manager)(nil)
)

// Option configures the plugin.
type Option interface{ apply(*Plugin) }

type optionFunc func(*Plugin)

func (f optionFunc) apply(p *Plugin) { f(p) }

// WithQuotas makes SetUp assign project quotas to Default volumes and
// TearDown clear them.
func WithQuotas(q Quotas) Option { return optionFunc(func(p *Plugin) { p.quotas = q }) }

// withTestHook makes SetUp and TearDown call h at their crash points
// (testhook's points; RemoveAll after each entry), for nodevol's crash
// tests. Other nodevol packages (the CSI driver's crash tests) reach it as
// friend.EmptyDirHook.
func withTestHook(h testhook.Hook) Option { return optionFunc(func(p *Plugin) { p.hook = h }) }

func init() {
	friend.EmptyDirHook = func(h testhook.Hook) any { return withTestHook(h) }
}

// FromAnotherMountNamespace says that the plugin runs in another mount
// namespace than the kubelet that sets the volumes up: an agent in a
// container whose kubelet root receives the host's mounts
// (HostToContainer). There a volume's own tmpfs or hugetlbfs, mounted
// after the container started, is a propagated copy with mount IDs of its
// own, and PlanTearDown proves it by its type, its source and its
// superblock's device number instead, as Location.AnyMountNamespace does,
// with the same weakness. Only PlanTearDown changes: what it says is what
// TearDown would do in the kubelet's namespace.
func FromAnotherMountNamespace() Option {
	return optionFunc(func(p *Plugin) { p.anyMountNamespace = true })
}

// New returns the plugin for host. With WithAdoption it opens this
// process's session in the kubelet root's session log (see Adoption).
func New(host volume.Host, opts ...Option) *Plugin {
	p := &Plugin{host: host}
	for _, o := range opts {
		o.apply(p)
	}
	if p.adoption != nil {
		p.adoption.start(host.Layout().Root())
	}
	return p
}

// Name returns PluginName.
func (p *Plugin) Name() string { return PluginName }

// Layout is the kubelet root's layout the plugin was built for (its Host's).
func (p *Plugin) Layout() volume.Layout { return p.host.Layout() }

// CanSupport reports whether spec is an emptyDir.
func (p *Plugin) CanSupport(spec *volume.Spec) bool { return spec != nil && spec.EmptyDir != nil }

// path returns the volume directory.
func (p *Plugin) path(podUID, vol string) (string, error) {
	return p.refPath(ordinaryRef(podUID, vol))
}

// NewMounter returns the Mounter for spec in pod.
func (p *Plugin) NewMounter(spec *volume.Spec, pod *volume.Pod) (volume.Mounter, error) {
	if !p.CanSupport(spec) {
		return nil, fmt.Errorf("%s: spec %q is not an emptyDir", PluginName, spec.Name)
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := volume.ValidatePodUID(pod.UID); err != nil {
		return nil, err
	}
	dir, err := p.path(pod.UID, spec.Name)
	if err != nil {
		return nil, err
	}
	return &mounter{plugin: p, source: *spec.EmptyDir, pod: pod, name: spec.Name, ref: ordinaryRef(pod.UID, spec.Name), dir: dir}, nil
}

// NewUnmounter returns the Unmounter for a volume of a pod; it needs no
// spec (the metadata file and the disk say what to undo).
func (p *Plugin) NewUnmounter(vol, podUID string) (volume.Unmounter, error) {
	dir, err := p.path(podUID, vol)
	if err != nil {
		return nil, err
	}
	return &unmounter{plugin: p, podUID: podUID, vol: vol, ref: ordinaryRef(podUID, vol), dir: dir}, nil
}

// ConstructSpec rebuilds a volume's spec from disk (reconstruction after a
// restart): from the metadata file when there is one, else from what is
// mounted on the volume directory. Both are reached by descriptors from
// the kubelet root, and the metadata is read as a bounded regular file, so
// a hostile pod directory (a symlink, a FIFO or /dev/zero in place of the
// metadata) is an error, never a hang or a path out of the root.
func (p *Plugin) ConstructSpec(vol, volumePath string) (*volume.Spec, error) {
	vp, err := p.host.Layout().ParseVolumePath(volumePath)
	if err != nil {
		return nil, err
	}
	if vp.Plugin != PluginName || vp.Volume != vol {
		return nil, fmt.Errorf("%s: %s is not the emptyDir volume %q", PluginName, volumePath, vol)
	}
	medium, pageSize, sizeLimit, mode, sticky, err := p.constructMedium(vp.PodUID, vol)
	if err != nil {
		return nil, err
	}
	src := &volume.EmptyDirSource{Medium: medium.StorageMedium(pageSize), SizeLimit: sizeLimit, Mode: mode, StickyBit: sticky}
	if mode != nil && *mode&^volume.MaxEmptyDirMode != 0 {
		src.Mode = nil // a forged record: the default mode, never a setuid bit
	}
	return &volume.Spec{Name: vol, EmptyDir: src}, nil
}

// Location places an emptyDir in another plugin's volume directory, as the
// kubelet's secret, configMap, downwardAPI, projected (Memory) and gitRepo
// (Default) plugins do through their wrapper mounter: the volume directory
// is <root>/pods/<uid>/volumes/<escaped Plugin>/<Dir> (or <Dir>/<Sub>: a
// CSI driver's target path is volumes/kubernetes.io~csi/<volume>/mount),
// and the ready marker
// and nodevol.json are in <root>/pods/<uid>/plugins/kubernetes.io~empty-dir/<Meta>
// (the kubelet names that "wrapped_<volume>").
//
// A located volume is reached exactly as an ordinary one: every directory
// by descriptor from the kubelet root, without following symlinks, on the
// pod directory's mount. Its mount source and its record are bound to the
// whole location — pod UID, Plugin, Dir and Meta — so that neither a
// record nor a mount made for one location (or for an ordinary volume)
// proves anything at another. Meta must not be a name an ordinary volume
// can have (a pod's volume names are DNS labels, so "wrapped_x", with its
// '_', cannot be one): an ordinary volume's metadata directory is then
// never a located volume's. On top of that every record names the location
// it was written for (none for an ordinary volume), and a record of another
// location or of an ordinary volume is an error (errors.Is
// [ErrOtherVolumesRecord]) before anything changes, never removed or
// overwritten: one volume's SetUp or TearDown never touches another's
// metadata, even when a name was reused or a record copied.
type Location struct {
	// Plugin is the plugin whose volume directory holds the emptyDir,
	// unescaped (kubernetes.io/secret). It must be a valid plugin name and
	// not kubernetes.io/empty-dir (NewMounter and NewUnmounter serve
	// those).
	Plugin string
	// Dir is the volume directory's name in volumes/<escaped Plugin>: one
	// path element (volume.ValidateVolumeDirName).
	Dir string
	// Sub, when set, is the volume directory's name in Dir, one path
	// element: the volume is volumes/<escaped Plugin>/<Dir>/<Sub>, as a
	// CSI node plugin's target path <volume>/mount, whose parent
	// directory the kubelet makes (and removes after the teardown). Only
	// Sub itself is made, mounted on and removed; Dir is made (mode 0750)
	// when missing and otherwise left alone.
	Sub string
	// RecordRequired says that every volume at this location is made by
	// SetUp, which records it before anything is in it (a CSI node
	// plugin's target): TearDown of one without a record removes its
	// directory only if it is empty, and otherwise refuses (ErrNoRecord),
	// removing nothing. Without it a volume with no record is torn down
	// as a Default one, as a kubelet that ran before nodevol left it.
	RecordRequired bool
	// AnyMountNamespace says that the process tearing the volume down may
	// run in another mount namespace than the one that set it up: a CSI
	// node plugin in a container, restarted, has a new namespace, where
	// the tmpfs its predecessor made is a propagated copy with mount IDs
	// of its own. A mount is then proven by its type, its source (a
	// random name bound to this location) and its superblock's device
	// number, not by its mount ID. Weaker: the device number of a tmpfs
	// is reused after an unmount, so a tmpfs someone mounted in its place
	// with the recorded source would pass (as with a pending record, see
	// the package documentation: that takes mounting in the host's
	// namespace, and puts nobody's data but the mounter's at stake).
	AnyMountNamespace bool
	// Meta is the metadata directory's name in
	// plugins/kubernetes.io~empty-dir: one path element that is not a valid
	// volume name (volume.ValidateVolumeName must fail), such as
	// "wrapped_" + Dir.
	Meta string
}

// ErrInvalidLocation is matched by the error of NewMounterAt and
// NewUnmounterAt for a Location they refuse.
var ErrInvalidLocation = errors.New("invalid emptyDir location")

// ErrOtherVolumesRecord is matched by the error for a metadata directory
// whose nodevol.json records another volume (another location, or an
// ordinary volume where a located one is expected, and the reverse):
// nothing is changed, the record is left in place.
var ErrOtherVolumesRecord = errors.New("the metadata records another volume")

// ErrMediumChanged is matched by the error of SetUp for a volume whose
// record says it was set up as another medium than the spec asks for:
// nothing is changed.
var ErrMediumChanged = errors.New("the volume was set up as another medium")

// ErrMountElsewhere is matched by the error of SetUp for a volume whose
// recorded mount is no longer on its directory but mounted elsewhere (the
// directory renamed, the mount moved): nothing is changed. TearDown
// refuses such a volume too (a plan with ActionRefuse naming the mount).
var ErrMountElsewhere = errors.New("the volume's mount is elsewhere")

// ErrNoRecord is matched by the error of TearDown for a located volume
// with RecordRequired that has no record and is not empty: it was not
// made by SetUp at this location, and nothing is removed.
var ErrNoRecord = errors.New("the volume has no record of its SetUp")

// ErrLocatedUnsupported is matched by the error of the operations a
// located volume does not have (resize and reconstruction go by an
// ordinary volume's name and never reach one; Usage has UsageAt).
var ErrLocatedUnsupported = errors.New("not supported for an emptyDir in another plugin's directory")

func (l Location) validate() error {
	bad := func(err error) error { return fmt.Errorf("%w %+v: %w", ErrInvalidLocation, l, err) }
	if err := volume.ValidatePluginName(l.Plugin); err != nil {
		return bad(err)
	}
	if l.Plugin == PluginName {
		return bad(errors.New("the plugin is kubernetes.io/empty-dir itself: use NewMounter or NewUnmounter"))
	}
	if err := volume.ValidateVolumeDirName(l.Dir); err != nil {
		return bad(err)
	}
	if l.Sub != "" {
		if err := volume.ValidateVolumeDirName(l.Sub); err != nil {
			return bad(err)
		}
	}
	if err := volume.ValidateVolumeDirName(l.Meta); err != nil {
		return bad(err)
	}
	if volume.ValidateVolumeName(l.Meta) == nil {
		return bad(fmt.Errorf("metadata name %q is a valid volume name, so it could be an ordinary emptyDir's metadata directory; use a name a pod's volume cannot have, such as %q", l.Meta, "wrapped_"+l.Meta))
	}
	return nil
}

// volRef names one emptyDir volume's directories: an ordinary one
// (volumes/kubernetes.io~empty-dir/<name>, metadata under the same name)
// or a located one (see Location).
type volRef struct {
	podUID string
	plugin string // unescaped plugin of the volumes directory
	dir    string // the volume directory's name in volumes/<plugin>
	sub    string // located: the volume directory's name in dir ("" when dir is it)
	// recordRequired and anyMountNamespace: see Location.
	recordRequired, anyMountNamespace bool
	meta                              string // the metadata directory's name in plugins/kubernetes.io~empty-dir
	located                           bool
}

func ordinaryRef(podUID, vol string) volRef {
	return volRef{podUID: podUID, plugin: PluginName, dir: vol, meta: vol}
}

func locatedRef(podUID string, loc Location) volRef {
	return volRef{podUID: podUID, plugin: loc.Plugin, dir: loc.Dir, sub: loc.Sub, meta: loc.Meta, located: true,
		recordRequired: loc.RecordRequired, anyMountNamespace: loc.AnyMountNamespace}
}

// record is what a located volume's nodevol.json says about its location;
// nil for an ordinary volume.
func (r volRef) record() *locationRecord {
	if !r.located {
		return nil
	}
	return &locationRecord{PodUID: r.podUID, Plugin: r.plugin, Dir: r.dir, Sub: r.sub, Meta: r.meta}
}

// owns returns an error matching ErrOtherVolumesRecord unless m (read from
// r's metadata directory, path names the record: called for a message
// only) was written for r.
func (r volRef) owns(m *metadata, path func() string) error {
	if !r.located {
		if m.Location == nil {
			return nil
		}
		return fmt.Errorf("%w: %s records the emptyDir at %s; it is left in place", ErrOtherVolumesRecord, path(), m.Location.describe())
	}
	want := r.record()
	switch {
	case m.Location != nil && *m.Location == *want:
		return nil
	case m.Location == nil:
		return fmt.Errorf("%w: %s is an ordinary emptyDir's record, not that of the emptyDir at %s; it is left in place", ErrOtherVolumesRecord, path(), want.describe())
	}
	return fmt.Errorf("%w: %s records the emptyDir at %s; it is left in place", ErrOtherVolumesRecord, path(), m.Location.describe())
}

// escapedPluginName is PluginName as a plugin directory's name
// (volume.EscapePluginName; TestEscapedPluginName checks it), and
// listedSuffix the path of an emptyDir plugin directory from its pod
// directory, with a leading "/": constants, not made at each start.
const (
	escapedPluginName = "kubernetes.io~empty-dir"
	listedSuffix      = "/volumes/" + escapedPluginName
)

// refPath returns the volume directory of r, once its names are checked,
// the metadata directory's too. (The metadata directory's path is the
// open directory's: its messages name it as it was reached.)
func (p *Plugin) refPath(r volRef) (dir string, err error) {
	if dir, err = p.host.Layout().VolumeDir(r.podUID, r.plugin, r.dir); err != nil {
		return "", err
	}
	if r.sub != "" {
		dir = filepath.Join(dir, r.sub)
	}
	if err := volume.ValidateVolumeDirName(r.meta); err != nil {
		return "", err
	}
	return dir, nil
}

// NewMounterAt returns the Mounter of an emptyDir in another plugin's
// volume directory (see Location), as the kubelet's wrapper mounter asks
// for it: the secret plugin's volume "creds" is a Memory emptyDir at
// Location{Plugin: "kubernetes.io/secret", Dir: "creds", Meta: "wrapped_creds"}.
// SetUp and TearDown work as for an ordinary volume, with the same
// guarantees. spec's name is not used (the location names the volume);
// its source is validated as NewMounter's.
func (p *Plugin) NewMounterAt(spec *volume.Spec, pod *volume.Pod, loc Location) (volume.Mounter, error) {
	if !p.CanSupport(spec) {
		return nil, fmt.Errorf("%s: spec is not an emptyDir", PluginName)
	}
	if pod == nil {
		return nil, fmt.Errorf("%s: NewMounterAt needs a pod", PluginName)
	}
	if err := loc.validate(); err != nil {
		return nil, err
	}
	if err := volume.ValidatePodUID(pod.UID); err != nil {
		return nil, err
	}
	check := volume.Spec{Name: "located", EmptyDir: spec.EmptyDir}
	if err := check.Validate(); err != nil {
		return nil, err
	}
	ref := locatedRef(pod.UID, loc)
	dir, err := p.refPath(ref)
	if err != nil {
		return nil, err
	}
	return &mounter{plugin: p, source: *spec.EmptyDir, pod: pod, name: loc.Meta, ref: ref, dir: dir}, nil
}

// NewUnmounterAt returns the Unmounter of an emptyDir in another plugin's
// volume directory (see Location), as the kubelet's UnmountViaEmptyDir
// asks for it. Its TearDown and CheckTearDown are those of an ordinary
// volume, reached through the location.
func (p *Plugin) NewUnmounterAt(podUID string, loc Location) (volume.Unmounter, error) {
	if err := loc.validate(); err != nil {
		return nil, err
	}
	if err := volume.ValidatePodUID(podUID); err != nil {
		return nil, err
	}
	ref := locatedRef(podUID, loc)
	dir, err := p.refPath(ref)
	if err != nil {
		return nil, err
	}
	return &unmounter{plugin: p, podUID: podUID, vol: loc.Meta, ref: ref, dir: dir}, nil
}
