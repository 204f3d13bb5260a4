package driver

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodevol/nodevol/volume"
)

// The volume attributes a pod gives (volumeAttributes in its csi volume).
const (
	// AttrMedium is "Default" (or empty: a directory on the kubelet's
	// filesystem, as an emptyDir) or "Memory" (a tmpfs).
	AttrMedium = "medium"
	// AttrSizeLimit is a Kubernetes quantity ("1Gi"): a Memory volume's
	// tmpfs size; for a Default volume the hard limit of its project
	// quota, where the filesystem has project quotas.
	AttrSizeLimit = "sizeLimit"
)

// What the kubelet adds to the volume context of an inline volume (with
// podInfoOnMount: true in the CSIDriver object).
const (
	kubeletPrefix   = "csi.storage.k8s.io/"
	ctxEphemeral    = kubeletPrefix + "ephemeral"
	ctxPodName      = kubeletPrefix + "pod.name"
	ctxPodNamespace = kubeletPrefix + "pod.namespace"
	ctxPodUID       = kubeletPrefix + "pod.uid"
)

// attributes are a publish request's volume context, checked.
type attributes struct {
	medium       volume.StorageMedium
	sizeLimit    int64 // bytes; 0: none
	podName      string
	podNamespace string
	podUID       string // "" when the kubelet did not say
}

// parseAttributes checks a volume context and returns every problem in it,
// not just the first: the volume must be ephemeral (the kubelet says so for
// an inline volume), medium and sizeLimit must be valid, and no other key
// is allowed except the kubelet's own (csi.storage.k8s.io/...), so that a
// misspelt attribute is an error instead of being ignored.
func parseAttributes(vc map[string]string) (attributes, error) {
	var a attributes
	var errs []error
	if vc[ctxEphemeral] != "true" {
		errs = append(errs, fmt.Errorf("not an inline ephemeral volume (%s is %q, want \"true\"): this driver serves only volumes declared in a pod's spec, never a PersistentVolume", ctxEphemeral, vc[ctxEphemeral]))
	}
	switch m := vc[AttrMedium]; m {
	case "", "Default":
	case "Memory":
		a.medium = volume.StorageMediumMemory
	default:
		errs = append(errs, fmt.Errorf("%s %q: want Default or Memory", AttrMedium, m))
	}
	if s, ok := vc[AttrSizeLimit]; ok {
		q, err := resource.ParseQuantity(s)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s %q: %w", AttrSizeLimit, s, err))
		case q.Sign() <= 0:
			errs = append(errs, fmt.Errorf("%s %q: must be positive", AttrSizeLimit, s))
		case q.Cmp(*resource.NewQuantity(math.MaxInt64, resource.BinarySI)) > 0:
			// Value would wrap to a negative number or give 0 (no
			// limit at all).
			errs = append(errs, fmt.Errorf("%s %q: too large (at most %d bytes)", AttrSizeLimit, s, int64(math.MaxInt64)))
		default:
			// Value rounds a fraction of a byte up, as the API server
			// does for sizeLimit.
			a.sizeLimit = q.Value()
		}
	}
	var unknown []string
	for k := range vc {
		if k != AttrMedium && k != AttrSizeLimit && !strings.HasPrefix(k, kubeletPrefix) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		errs = append(errs, fmt.Errorf("unknown volume attributes %q: this driver takes %s and %s", unknown, AttrMedium, AttrSizeLimit))
	}
	a.podName, a.podNamespace, a.podUID = vc[ctxPodName], vc[ctxPodNamespace], vc[ctxPodUID]
	return a, errors.Join(errs...)
}
