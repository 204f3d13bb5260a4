package emptydir

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
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
	Logger klog.Logger
	// Registerer receives the counter of adopted volumes,
	// nodevol_emptydir_adopted_volumes_total{medium}; nil registers none.
	Registerer prometheus.Registerer
}

// WithAdoption makes SetUp adopt the tmpfs or hugetlbfs that the kubelet
// running on the node before nodevol mounted for a volume it is asked to
// set up, under the adoption rule (see the package documentation): only a
// mount that kubelet's SetUp makes, the sole mount on the volume
// directory, the whole filesystem, nothing beneath it, bound nowhere but
// in the pod's subPath directories of the volume, and made while no
// nodevol process ran on this kubelet root since the node booted — which
// the session log, <root>/nodevol-sessions.json, tells. New opens this
// process's session in the log. The adopted mount is recorded as the
// volume's own in its nodevol.json ("adopted": true) and torn down as
// nodevol's own mounts are. Without unique mount IDs (Linux before 6.8)
// nothing is adopted.
func WithAdoption(a Adoption) Option {
	return optionFunc(func(p *Plugin) { p.adoption = &adoption{cfg: a} })
}

// adoption is WithAdoption's state: this process's session and the
// counter.
type adoption struct {
	cfg      Adoption
	sessions *sessions
	adopted  *prometheus.CounterVec
}

// start opens the session under root, keeps it beating until cfg.Stop,
// and registers the counter.
func (a *adoption) start(root string) {
	a.sessions = startSessions(root, a.cfg.Logger)
	go a.sessions.run(a.cfg.Stop)
	a.adopted = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodevol", Subsystem: "emptydir", Name: "adopted_volumes_total",
		Help: "Volumes whose tmpfs or hugetlbfs, mounted by the kubelet that ran before nodevol, SetUp adopted as the volume's own, by medium."},
		[]string{"medium"})
	if a.cfg.Registerer == nil {
		return
	}
	if err := a.cfg.Registerer.Register(a.adopted); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if errors.As(err, &dup) {
			if c, ok := dup.ExistingCollector.(*prometheus.CounterVec); ok {
				a.adopted = c // another plugin of this process registered it
				return
			}
		}
		a.cfg.Logger.Error(err, "Registering the adopted-volumes metric")
	}
}
