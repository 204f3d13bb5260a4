package harness

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The soak (kubelet/hack/soak): on the e2e's two-node cluster, with
// deploy/'s exporter and nodevol-csi applied through the API, it creates
// and deletes pods at a chosen rate for a chosen duration, with the volume
// mix, NAS mounts and faults its seeded schedule says, checks the
// invariants as it goes and after the drain, and reports its figures.
// docs/reliability.md describes it and its results.

// soakInputs are the soak's settings, handed to the namespace's PID 1.
type soakInputs struct {
	Params soakParams `json:"params"`
	// Kubelets are the nodes' kubelet flavors, node 1's first.
	Kubelets []string `json:"kubelets"`
	// LivenessBound is how long a deleted pod may take to leave the API
	// and the node after the last thing that held it (its deletion, its
	// NAS's unmount, the end of a fault).
	LivenessBound time.Duration `json:"livenessBound"`
	// RunBound is how long a pod may take from its creation (or the end
	// of a fault) to Running.
	RunBound time.Duration `json:"runBound"`
	// SampleEvery is how often resources are sampled.
	SampleEvery time.Duration `json:"sampleEvery"`
	// Command is the command line that replays the run (its seed and
	// parameters).
	Command string `json:"command"`
	// HugePages is how many huge pages of the default size the host's
	// pool holds at least during the run (0: the host's as it is).
	HugePages int `json:"hugePages"`
}

const soakUsage = `usage: go run ./hack/soak -nodevol KUBELET -stock KUBELET -apiserver KUBE-APISERVER -scheduler KUBE-SCHEDULER -controller-manager KUBE-CONTROLLER-MANAGER
           [-kubelets nodevol,stock] [-duration 30m] [-rate 30] [-seed N] [-fault-every 45s] [-hugepages 32]
           [-nodevol-image FILE] [-csi-image FILE] [-chart DIR] [-timeout D] [-workdir DIR]`

// Soak is the soak command (kubelet/hack/soak): its flags are args; it
// returns the exit status: 0 when no invariant was violated, 1 when one
// was (each printed with the seed that replays the run), 2 when the
// harness failed.
func Soak(args []string, stdout, stderr io.Writer) int {
	if code, ok := reexecuted(args, stdout, stderr); ok {
		return code
	}
	opts, err := parseSoakFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "soak:", err)
		}
		return 2
	}
	return runDriver(opts, stdout, stderr)
}

func parseSoakFlags(args []string, stderr io.Writer) (options, error) {
	o := options{mode: modeSoak}
	in := &soakInputs{Params: soakParams{Nodes: 2}}
	p := &in.Params
	fs := newFlagSet("soak", soakUsage, stderr)
	o.binaryFlags(fs, "")
	kubelets := fs.String("kubelets", "nodevol,stock", "the two nodes' kubelets, node 1's first (nodevol or stock, each with its binary's flag)")
	fs.StringVar(&o.nodevolImage, "nodevol-image", "", "the exporter's image, an OCI layout tarball with `FILE`.digest beside it (default: built with the root module's ./hack/image)")
	fs.StringVar(&o.csiImage, "csi-image", "", "nodevol-csi's image, an OCI layout tarball with `FILE`.digest beside it (default: built with ./hack/image -binary nodevol-csi)")
	fs.StringVar(&o.chart, "chart", "../deploy/helm/nodevol", "the `DIR`ectory of nodevol's Helm chart, whose agent and driver the soak installs (rendered as -mode deploy renders it)")
	fs.StringVar(&o.workdir, "workdir", "", "work directory, kept afterwards (default: a temporary one, removed when the run passes)")
	fs.DurationVar(&o.timeout, "timeout", 0, "the watchdog kills the namespace after this long (default: -duration + 30m)")
	fs.DurationVar(&p.Duration, "duration", 30*time.Minute, "how long pods are created (then the run drains: every pod deleted, every NAS unmounted, the DaemonSets deleted)")
	fs.Float64Var(&p.Rate, "rate", 30, "pods created per minute, on average, over both nodes")
	seed := fs.Uint64("seed", 0, "the schedule's seed (default: a random one, printed); the same seed and parameters give the same schedule")
	fs.DurationVar(&p.MinLifetime, "min-lifetime", 5*time.Second, "shortest time a pod runs before it is deleted")
	fs.DurationVar(&p.MaxLifetime, "max-lifetime", 30*time.Second, "longest time a pod runs before it is deleted")
	fs.IntVar(&p.NASEvery, "nas-every", 10, "one pod in N gets a NAS mounted inside one of its volumes (0: none)")
	fs.DurationVar(&p.NASHold, "nas-hold", 20*time.Second, "a NAS stays mounted up to this long after its pod's deletion")
	fs.IntVar(&p.SetUpDeleteEvery, "setup-delete-every", 20, "one pod in N is deleted as soon as the kubelet starts setting up its volumes (0: none)")
	fs.DurationVar(&p.FaultEvery, "fault-every", 45*time.Second, "mean interval between injected faults (0: none)")
	fs.DurationVar(&in.LivenessBound, "liveness-bound", 150*time.Second, "a deleted pod must leave the API and the node within this long after its deletion, its NAS's unmount or the end of a fault, whichever is last")
	fs.DurationVar(&in.RunBound, "run-bound", 3*time.Minute, "a pod must be Running within this long after its creation or the end of a fault, whichever is last")
	fs.IntVar(&in.HugePages, "hugepages", 32, "the host's pool of 2 MiB huge pages is made at least this large for the run and given back afterwards, so that the nodes can give HugePages volumes (0: left as it is; the volumes are in the mix when the nodes have 4 MiB of huge pages)")
	fs.DurationVar(&in.SampleEvery, "sample-every", 15*time.Second, "how often the kubelets', nodevol-csi's and the exporter's RSS, descriptors and goroutines are sampled")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return o, errors.New("no arguments, only flags")
	}
	p.Seed = *seed
	if p.Seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		p.Seed = binary.LittleEndian.Uint64(b[:]) >> 1
	}
	if o.timeout == 0 {
		o.timeout = p.Duration + 30*time.Minute
	}
	o.kubelets = strings.Split(*kubelets, ",")
	in.Kubelets = o.kubelets
	if len(o.kubelets) != p.Nodes {
		return o, fmt.Errorf("-kubelets %s: want %d, one per node", *kubelets, p.Nodes)
	}
	bins := []*string{&o.apiserver, &o.scheduler, &o.controllerManager}
	kb, err := o.kubeletBinaries(*kubelets)
	if err != nil {
		return o, err
	}
	bins = append(bins, kb...)
	for _, b := range bins {
		if *b == "" {
			fs.Usage()
			return o, errors.New("want -apiserver, -scheduler, -controller-manager and the binary of each of -kubelets")
		}
	}
	if _, err := makeSchedule(*p); err != nil {
		return o, err
	}
	for _, b := range slices.Compact(bins) {
		abs, err := filepath.Abs(*b)
		if err != nil {
			return o, err
		}
		if fi, err := os.Stat(abs); err != nil || fi.Mode()&0o111 == 0 {
			return o, fmt.Errorf("binary %s: not an executable file (%v)", abs, err)
		}
		*b = abs
	}
	for _, d := range []*string{&o.nodevolImage, &o.chart, &o.csiImage} {
		if *d == "" {
			continue
		}
		abs, err := filepath.Abs(*d)
		if err != nil {
			return o, err
		}
		*d = abs
	}
	in.Command = soakCommand(fs, p.Seed)
	o.soak = in
	return o, nil
}

// soakCommand is the command line that replays the run: every flag as
// given, and the seed.
func soakCommand(fs *flag.FlagSet, seed uint64) string {
	parts := []string{"go run ./hack/soak"}
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "seed" {
			parts = append(parts, "-"+f.Name+" "+f.Value.String())
		}
	})
	return strings.Join(append(parts, fmt.Sprintf("-seed %d", seed)), " ")
}

// hugePagesSysctl is the host's pool of huge pages of the default size
// (2 MiB on x86_64 and arm64), which the kubelets report as their nodes'
// hugepages-2Mi.
const hugePagesSysctl = "vm/nr_hugepages"

// reserveHugePages makes the host's pool of default-size huge pages at
// least n for the run (the kernel may give fewer: memory too fragmented),
// so that the nodes have pages to give HugePages volumes; restore gives the
// pool back its size before. A pool already that large is left alone.
func reserveHugePages(n int, log *logger) (restore func() error, err error) {
	path := filepath.Join("/proc/sys", hugePagesSysctl)
	read := func() (int, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(strings.TrimSpace(string(b)))
	}
	was, err := read()
	if err != nil {
		return nil, fmt.Errorf("huge pages: %w", err)
	}
	if was >= n {
		return func() error { return nil }, nil
	}
	restore = func() error {
		if err := os.WriteFile(path, []byte(strconv.Itoa(was)), 0o644); err != nil {
			return fmt.Errorf("giving back the huge pages (%s to %d): %w", path, was, err)
		}
		return nil
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(n)), 0o644); err != nil {
		return nil, fmt.Errorf("reserving %d huge pages: %w", n, err)
	}
	got, err := read()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("huge pages: %w", err), restore())
	}
	log.Printf("huge pages: the host's pool is %d pages for the run (was %d, asked %d)", got, was, n)
	return restore, nil
}
