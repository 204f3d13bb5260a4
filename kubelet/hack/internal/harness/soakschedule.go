package harness

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// The soak's schedule: every pod it creates (when, on which node, with
// which volumes, how long it lives, whether a NAS is mounted in one of its
// volumes and for how long after its deletion, whether it is deleted while
// its volumes are being set up) and every fault it injects (when, what,
// where), all drawn from one seed. The same seed and parameters give the
// same schedule: a run that failed is replayed with its seed.

// soakParams are the soak's parameters: with the seed they make the
// schedule.
type soakParams struct {
	Seed     uint64        `json:"seed"`
	Duration time.Duration `json:"duration"`
	// Rate is how many pods are created per minute, on average (arrivals
	// are a Poisson process).
	Rate float64 `json:"rate"`
	// Nodes is how many nodes the pods are spread over.
	Nodes int `json:"nodes"`
	// MinLifetime and MaxLifetime bound how long a pod runs before it is
	// deleted (uniform between them).
	MinLifetime time.Duration `json:"minLifetime"`
	MaxLifetime time.Duration `json:"maxLifetime"`
	// NASEvery: one pod in NASEvery gets a NAS (0: none).
	NASEvery int `json:"nasEvery"`
	// NASHold is the longest a NAS stays mounted after its pod's deletion
	// (uniform from 0).
	NASHold time.Duration `json:"nasHold"`
	// SetUpDeleteEvery: one pod in SetUpDeleteEvery is deleted as soon as
	// the kubelet starts setting up its volumes (0: none).
	SetUpDeleteEvery int `json:"setUpDeleteEvery"`
	// FaultEvery is the mean interval between injected faults (0: none);
	// a run gets at least one fault of each kind.
	FaultEvery time.Duration `json:"faultEvery"`
	// HugePages says whether the nodes have huge pages to give HugePages
	// volumes (the schedule has none otherwise).
	HugePages bool `json:"hugePages"`
}

// volumeType is one kind of volume in the soak's mix.
type volumeType string

const (
	volEmptyDir      volumeType = "emptyDir"                 // medium Default, no sizeLimit
	volEmptyDirLimit volumeType = "emptyDir sizeLimit"       // medium Default, sizeLimit 64Mi
	volMemory        volumeType = "emptyDir Memory"          // sizeLimit 16Mi
	volHugePages     volumeType = "emptyDir HugePages"       // 2Mi pages
	volSecret        volumeType = "secret"                   // wraps an emptyDir (Memory)
	volConfigMap     volumeType = "configMap"                // wraps an emptyDir (Default)
	volProjected     volumeType = "projected"                // a service account token, a configMap and downwardAPI
	volDownwardAPI   volumeType = "downwardAPI"              // wraps an emptyDir (Memory)
	volCSIDefault    volumeType = "nodevol-csi Default"      // inline, sizeLimit 64Mi
	volCSIMemory     volumeType = "nodevol-csi Memory"       // inline, sizeLimit 16Mi
	volSubPath       volumeType = "subPath (of an emptyDir)" // not a volume: a container's subPath mount of the pod's emptyDir
)

// volumeTypes are the types in the order the report lists them.
var volumeTypes = []volumeType{volEmptyDir, volEmptyDirLimit, volMemory, volHugePages, volSecret, volConfigMap, volProjected, volDownwardAPI, volCSIDefault, volCSIMemory, volSubPath}

// volumeName is the volume's name in a pod: short, and the type is known
// from it.
var volumeName = map[volumeType]string{
	volEmptyDir: "ed", volEmptyDirLimit: "edl", volMemory: "mem", volHugePages: "huge",
	volSecret: "sec", volConfigMap: "cm", volProjected: "proj", volDownwardAPI: "dapi",
	volCSIDefault: "csid", volCSIMemory: "csim",
}

// typeOfVolume is volumeName's inverse.
func typeOfVolume(name string) (volumeType, bool) {
	for t, n := range volumeName {
		if n == name {
			return t, true
		}
	}
	return "", false
}

// nasHolding says whether a NAS can be mounted inside the type's volume:
// the volumes the host can write into (emptyDir of every medium, and
// nodevol-csi's). The atomic-writer volumes (secret, configMap, projected,
// downwardAPI) are rewritten by the kubelet and get none.
func nasHolding(t volumeType) bool {
	switch t {
	case volEmptyDir, volEmptyDirLimit, volMemory, volHugePages, volCSIDefault, volCSIMemory:
		return true
	}
	return false
}

// csiVolume says whether the type is nodevol-csi's.
func csiVolume(t volumeType) bool { return t == volCSIDefault || t == volCSIMemory }

// podPlan is one pod of the schedule.
type podPlan struct {
	Index int           `json:"index"`
	At    time.Duration `json:"at"` // from the start of the churn
	Node  int           `json:"node"`
	// Volumes are the pod's volume types, in the pod spec's order.
	Volumes []volumeType `json:"volumes"`
	// SubPath: the container also mounts a subPath of the pod's emptyDir
	// (volEmptyDir, which the pod then has).
	SubPath  bool          `json:"subPath"`
	Lifetime time.Duration `json:"lifetime"` // Running → deletion
	NAS      *nasPlan      `json:"nas,omitempty"`
	// DeleteInSetUp: deleted as soon as the kubelet starts mounting its
	// volumes, never waited for to run.
	DeleteInSetUp bool `json:"deleteInSetUp,omitempty"`
}

// name is the pod's name.
func (p podPlan) name() string { return fmt.Sprintf("soak-%05d", p.Index) }

// nasPlan is a NAS mounted inside one of a pod's volumes while it runs,
// unmounted Hold after the pod's deletion.
type nasPlan struct {
	Volume volumeType    `json:"volume"`
	Kind   nasKind       `json:"kind"`
	Hold   time.Duration `json:"hold"`
	// Files are the sentinel files' sizes; their paths are
	// sentinelPath(i).
	Files []int `json:"files"`
}

// sentinelPath is the i-th sentinel file's path in a NAS: some at its
// top, some a directory down, as a share has them.
func sentinelPath(i int) string {
	if i%2 == 1 {
		return fmt.Sprintf("dir-%d/SENTINEL-%d", i, i)
	}
	return fmt.Sprintf("SENTINEL-%d", i)
}

// faultKind is one kind of injected fault.
type faultKind string

const (
	faultKubeletKill       faultKind = "kubelet SIGKILLed and restarted"
	faultContainerdRestart faultKind = "containerd restarted"
	faultCSIKill           faultKind = "nodevol-csi SIGKILLed (the kubelet restarts it)"
	faultExporterRestart   faultKind = "exporter pod deleted (the DaemonSet makes a new one)"
	faultAPIServerRestart  faultKind = "kube-apiserver SIGKILLed and restarted"
	// faultDeleteInSetUp is not scheduled as a fault: the pods that
	// have DeleteInSetUp are its injections.
	faultDeleteInSetUp faultKind = "pod deleted while its volumes are set up"
)

// faultKinds are the kinds in the order the report lists them.
var faultKinds = []faultKind{faultKubeletKill, faultContainerdRestart, faultCSIKill, faultExporterRestart, faultAPIServerRestart, faultDeleteInSetUp}

// scheduledFaults are the kinds the fault schedule draws from.
var scheduledFaults = faultKinds[:5]

// faultPlan is one fault of the schedule.
type faultPlan struct {
	At   time.Duration `json:"at"`
	Kind faultKind     `json:"kind"`
	Node int           `json:"node"` // 0 for the API server
	// Down is how long a killed process stays down before it is started
	// again (kubelet, API server).
	Down time.Duration `json:"down"`
}

// soakSchedule is the whole schedule.
type soakSchedule struct {
	Pods   []podPlan   `json:"pods"`
	Faults []faultPlan `json:"faults"`
}

// Limits of the pods' mix.
const (
	minVolumesPerPod = 2
	maxVolumesPerPod = 5
	maxSentinels     = 4
	maxSentinelSize  = 64 << 10
)

// makeSchedule draws the schedule from p.Seed. It uses its own generator
// (PCG), whose sequence the math/rand/v2 package keeps stable, so that a
// seed replays on every Go version that has it.
func makeSchedule(p soakParams) (soakSchedule, error) {
	if p.Rate <= 0 || p.Duration <= 0 || p.Nodes < 1 || p.MinLifetime < 0 || p.MaxLifetime < p.MinLifetime {
		return soakSchedule{}, fmt.Errorf("soak parameters: want a positive rate and duration, at least one node and 0 ≤ min lifetime ≤ max lifetime: %+v", p)
	}
	// Two streams, so that changing the faults' parameters leaves the pods
	// as they were, and the other way round.
	pods := rand.New(rand.NewPCG(p.Seed, 0x9e3779b97f4a7c15))
	faults := rand.New(rand.NewPCG(p.Seed, 0xbf58476d1ce4e5b9))
	var s soakSchedule
	var types []volumeType
	for _, t := range volumeTypes {
		if t == volSubPath || (t == volHugePages && !p.HugePages) {
			continue
		}
		types = append(types, t)
	}
	mean := float64(time.Minute) / p.Rate
	at := time.Duration(0)
	for i := 1; ; i++ {
		at += time.Duration(pods.ExpFloat64() * mean)
		if at >= p.Duration {
			break
		}
		pp := podPlan{Index: i, At: at, Node: 1 + pods.IntN(p.Nodes)}
		pp.Lifetime = p.MinLifetime + time.Duration(pods.Int64N(int64(p.MaxLifetime-p.MinLifetime)+1))
		n := minVolumesPerPod + pods.IntN(maxVolumesPerPod-minVolumesPerPod+1)
		picked := slices.Clone(types)
		pods.Shuffle(len(picked), func(a, b int) { picked[a], picked[b] = picked[b], picked[a] })
		picked = picked[:n]
		// Every pod has at least one volume a NAS can be mounted in.
		if !slices.ContainsFunc(picked, nasHolding) {
			picked[0] = []volumeType{volEmptyDir, volEmptyDirLimit, volMemory, volCSIDefault, volCSIMemory}[pods.IntN(5)]
		}
		// In the spec's order, as volumeTypes lists them.
		slices.SortFunc(picked, func(a, b volumeType) int { return slices.Index(volumeTypes, a) - slices.Index(volumeTypes, b) })
		pp.Volumes = picked
		pp.SubPath = slices.Contains(picked, volEmptyDir) && pods.IntN(2) == 0
		switch {
		case p.SetUpDeleteEvery > 0 && pods.IntN(p.SetUpDeleteEvery) == 0:
			pp.DeleteInSetUp = true
		case p.NASEvery > 0 && pods.IntN(p.NASEvery) == 0:
			var holders []volumeType
			for _, t := range picked {
				if nasHolding(t) {
					holders = append(holders, t)
				}
			}
			nas := &nasPlan{Volume: holders[pods.IntN(len(holders))], Kind: nasKind(pods.IntN(2))}
			nas.Hold = time.Duration(pods.Int64N(int64(p.NASHold) + 1))
			for range 1 + pods.IntN(maxSentinels) {
				nas.Files = append(nas.Files, 1+pods.IntN(maxSentinelSize))
			}
			pp.NAS = nas
		}
		s.Pods = append(s.Pods, pp)
	}
	if p.FaultEvery > 0 {
		// The kinds come in shuffled rounds, so that a short run still
		// injects each of them once when it has room for as many faults.
		var round []faultKind
		at := time.Duration(0)
		for {
			at += time.Duration(faults.ExpFloat64() * float64(p.FaultEvery))
			if at >= p.Duration {
				break
			}
			if len(round) == 0 {
				round = slices.Clone(scheduledFaults)
				faults.Shuffle(len(round), func(a, b int) { round[a], round[b] = round[b], round[a] })
			}
			f := faultPlan{At: at, Kind: round[0], Node: 1 + faults.IntN(p.Nodes)}
			round = round[1:]
			if f.Kind == faultAPIServerRestart {
				f.Node = 0
			}
			f.Down = time.Duration(faults.Int64N(int64(3 * time.Second)))
			s.Faults = append(s.Faults, f)
		}
		// A run too short for one round by the mean interval still gets
		// one fault of each kind, at random times in its first 90 %.
		if n := len(scheduledFaults); len(s.Faults) < n {
			round := slices.Clone(scheduledFaults)
			faults.Shuffle(n, func(a, b int) { round[a], round[b] = round[b], round[a] })
			ats := make([]time.Duration, n)
			for i := range ats {
				ats[i] = time.Duration(faults.Int64N(int64(p.Duration) * 9 / 10))
			}
			slices.Sort(ats)
			s.Faults = s.Faults[:0]
			for i, k := range round {
				f := faultPlan{At: ats[i], Kind: k, Node: 1 + faults.IntN(p.Nodes), Down: time.Duration(faults.Int64N(int64(3 * time.Second)))}
				if k == faultAPIServerRestart {
					f.Node = 0
				}
				s.Faults = append(s.Faults, f)
			}
		}
	}
	return s, nil
}
