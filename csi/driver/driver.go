package driver

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/volume"
)

// DefaultName is the driver's name: a pod's csi volume names it as its
// driver, and the CSIDriver object has it as its name. It is under
// nodevol.github.io, the project organisation's domain.
const DefaultName = "emptydir.nodevol.github.io"

// Config configures a Driver.
type Config struct {
	// Name is the driver's name, DefaultName when empty.
	Name string
	// Version is the vendor version GetPluginInfo reports.
	Version string
	// NodeID is the node's ID as NodeGetInfo reports it: the Kubernetes
	// node name.
	NodeID string
	// KubeletRoot is the kubelet's --root-dir (/var/lib/kubelet), as the
	// kubelet names it in target paths, and as this process sees it (the
	// DaemonSet mounts it at the same path). It may be a symlink; nothing
	// below it is ever resolved through one.
	KubeletRoot string
	// Quotas, when set, gives every Default volume a project quota whose
	// hard limit is its sizeLimit (where the filesystem under the kubelet
	// root has project quotas) and measures it; nil: no quotas, and
	// NodeGetVolumeStats walks the volume.
	Quotas emptydir.Quotas
	// MemoryBytes bounds a Memory volume's tmpfs: it is the smallest of
	// this and the volume's sizeLimit (the node's memory, say; 0: no bound
	// but the sizeLimit, and tmpfs's own default of half the RAM without one).
	MemoryBytes int64
	// Logger receives structured logs; the zero Logger discards them.
	Logger logr.Logger
	// Registerer receives the driver's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Driver is nodevol's CSI node plugin: the CSI Identity and Node services
// for inline ephemeral volumes with the emptyDir teardown semantics of
// package emptydir (see the package documentation).
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	name, version, nodeID string
	layout                volume.Layout // the kubelet root's
	plugin                *emptydir.Plugin
	log                   logr.Logger
	metrics               *metrics

	mu       sync.Mutex
	busy     map[string]bool // target paths with a publish or unpublish in flight
	measures map[string]int  // target paths' NodeGetVolumeStats in flight
	measured *sync.Cond      // on mu: a target's last measurement ended

	registered atomic.Bool // the kubelet said the registration succeeded
}

// ErrConfig is matched by the error of New for a Config it refuses.
var ErrConfig = errors.New("invalid driver configuration")

// driverName is the CSI spec's rule for a plugin name: at most 63
// characters, alphanumerics, '-' and '.', starting and ending with an
// alphanumeric (a domain name in reverse order is recommended).
var driverName = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9.-]{0,61}[a-zA-Z0-9])?$`)

// New returns a Driver for cfg.
func New(cfg Config) (*Driver, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	var errs []error
	if !driverName.MatchString(cfg.Name) {
		errs = append(errs, fmt.Errorf("driver name %q: want at most 63 characters, letters, digits, '-' and '.', starting and ending with a letter or digit", cfg.Name))
	}
	if cfg.NodeID == "" {
		errs = append(errs, errors.New("no node ID"))
	}
	if !filepath.IsAbs(cfg.KubeletRoot) || filepath.Clean(cfg.KubeletRoot) != cfg.KubeletRoot {
		errs = append(errs, fmt.Errorf("kubelet root %q: want an absolute, clean path", cfg.KubeletRoot))
	}
	if cfg.MemoryBytes < 0 {
		errs = append(errs, fmt.Errorf("memory bound %d: negative", cfg.MemoryBytes))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	layout, err := volume.NewLayout(cfg.KubeletRoot)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	var opts []emptydir.Option
	if cfg.Quotas != nil {
		opts = append(opts, emptydir.WithQuotas(cfg.Quotas))
	}
	m, err := newMetrics(cfg.Registerer, cfg.Name)
	if err != nil {
		return nil, err
	}
	d := &Driver{
		name:     cfg.Name,
		version:  cfg.Version,
		nodeID:   cfg.NodeID,
		layout:   layout,
		plugin:   emptydir.New(volume.NewHost(layout, nil, cfg.MemoryBytes), opts...),
		log:      cfg.Logger,
		metrics:  m,
		busy:     map[string]bool{},
		measures: map[string]int{},
	}
	d.measured = sync.NewCond(&d.mu)
	return d, nil
}

// Name is the driver's name.
func (d *Driver) Name() string { return d.name }

// Register registers the driver's Identity and Node services on s.
func (d *Driver) Register(s grpc.ServiceRegistrar) {
	csi.RegisterIdentityServer(s, d)
	csi.RegisterNodeServer(s, d)
}

// Registered reports whether the kubelet has said that it registered the
// driver (see RegistrationServer).
func (d *Driver) Registered() bool { return d.registered.Load() }

// lock marks a publish or unpublish of target path as in flight and
// returns what ends it; when one already is, an ABORTED status (the CO
// retries). A measurement in flight (NodeGetVolumeStats holds a Memory
// volume's mount open) is waited for: no new one starts meanwhile, so an
// unpublish never finds the mount busy half-way through.
func (d *Driver) lock(path string) (unlock func(), err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.busy[path] {
		return nil, status.Errorf(codes.Aborted, "an operation on %s is in progress", path)
	}
	d.busy[path] = true
	for d.measures[path] > 0 {
		d.measured.Wait()
	}
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.busy, path)
	}, nil
}

// measuring marks a measurement of target path as in flight and returns
// what ends it; while a publish or unpublish is, an ABORTED status (the
// kubelet asks again at its next poll). Measurements do not exclude each
// other.
func (d *Driver) measuring(path string) (done func(), err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.busy[path] {
		return nil, status.Errorf(codes.Aborted, "an operation on %s is in progress", path)
	}
	d.measures[path]++
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.measures[path]--; d.measures[path] == 0 {
			delete(d.measures, path)
			d.measured.Broadcast()
		}
	}, nil
}
