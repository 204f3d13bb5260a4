package emptydir

import (
	"github.com/go-logr/logr"

	"github.com/nodevol/nodevol/volume"
)

// Adoption configures WithAdoption.
type Adoption struct {
	// Stop ends this process's session in the session log (a last
	// heartbeat); nil: the session lasts as long as the process, whose
	// last heartbeat is then at most ten seconds before it ends.
	Stop <-chan struct{}
	// Logger receives what the session log says (why no mount will be
	// adopted, a heartbeat that failed). SetUp logs each adoption to the
	// logger of its context.
	Logger logr.Logger
	// Adopted, when set, is called after each adoption with the medium
	// of the volume (Memory or HugePages): to count them, as
	// nodevol-kubelet does in AdoptedVolumesMetric (the kubelet
	// adapter's volumeplugin.WithAdoption takes a prometheus.Registerer).
	// It may be called from several SetUps at once. A function rather
	// than a Registerer, so that a program that links this package (the
	// nodevol binary, for scans and teardowns) does not link
	// client_golang and pay its initialisation at every start.
	Adopted func(medium volume.Medium)
}

// AdoptedVolumesMetric names the counter of adoptions by medium, with its
// help, for whoever counts them (Adoption.Adopted).
const (
	AdoptedVolumesMetric = "nodevol_emptydir_adopted_volumes_total"
	AdoptedVolumesHelp   = "Volumes whose tmpfs or hugetlbfs, mounted by the kubelet that ran before nodevol, SetUp adopted as the volume's own, by medium."
)

// WithAdoption makes SetUp adopt the tmpfs or hugetlbfs that the kubelet
// running on the node before nodevol mounted for a volume it is asked to
// set up, under the adoption rule (see the package documentation): only a
// mount that kubelet's SetUp makes, the sole mount on the volume
// directory, the whole filesystem, nothing beneath it, bound nowhere but
// in the pod's subPath directories of the volume, made while no nodevol
// process ran on this kubelet root since the node booted — which the
// session log, <root>/nodevol-sessions.json, tells — and on the volume
// directory already when this process started (not renamed or moved
// there since: the mount table read at New tells). New opens this
// process's session in the log. The adopted mount is recorded as the
// volume's own in its nodevol.json ("adopted": true) and torn down as
// nodevol's own mounts are. Without unique mount IDs (Linux before 6.8)
// nothing is adopted.
func WithAdoption(a Adoption) Option {
	return optionFunc(func(p *Plugin) { p.adoption = &adoption{cfg: a} })
}

// adoption is WithAdoption's state: this process's session.
type adoption struct {
	cfg      Adoption
	sessions *sessions
}

// start opens the session under root and keeps it beating until cfg.Stop.
func (a *adoption) start(root string) {
	a.sessions = startSessions(root, a.cfg.Logger)
	go a.sessions.run(a.cfg.Stop)
}
