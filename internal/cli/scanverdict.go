package cli

import "fmt"

// scanVerdict is what "nodevol scan" says about one volume directory. The
// names (String) are part of the CLI's contract: the VERDICT column and
// the "verdict" field of --json.
type scanVerdict int

const (
	// verdictOK: nothing is mounted on or beneath the volume directory
	// (or it is gone).
	verdictOK scanVerdict = iota
	// verdictInUse: a single mount on the volume directory itself, the
	// one its own plugin makes and its teardown unmounts, with nothing
	// beneath it. Normal for every running pod.
	verdictInUse
	// verdictDanger: a mount the volume's teardown would cross or that is
	// not the volume's own: nested in the directory, foreign or unprovable
	// on an emptyDir directory, stacked, or foreign in the subPath tree.
	verdictDanger
	// verdictUnknown: the kernel cannot say for sure whether the volume
	// directory is a mount point.
	verdictUnknown
	// verdictError: the volume could not be examined.
	verdictError
)

// scanVerdicts lists every verdict in the order of the summary line.
var scanVerdicts = []scanVerdict{verdictOK, verdictInUse, verdictDanger, verdictUnknown, verdictError}

func (v scanVerdict) String() string {
	switch v {
	case verdictOK:
		return "ok"
	case verdictInUse:
		return "in-use"
	case verdictDanger:
		return "danger"
	case verdictUnknown:
		return "unknown"
	case verdictError:
		return "error"
	}
	return fmt.Sprintf("scanVerdict(%d)", int(v))
}

// MarshalText writes the verdict's name.
func (v scanVerdict) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// reasonCode is the machine-readable reason for a volume's verdict; each
// code belongs to one verdict. The names are part of the CLI's contract
// (the "reasonCode" field of --json).
type reasonCode int

const (
	reasonNotMounted          reasonCode = iota // ok: nothing mounted on or beneath it
	reasonGone                                  // ok: removed since it was listed
	reasonOwnMount                              // in-use: an emptyDir's own tmpfs/hugetlbfs, proven by SetUp's record
	reasonPluginMount                           // in-use: another plugin's volume, mounted on its own directory
	reasonNestedMount                           // danger: a mount beneath the volume directory
	reasonForeignMount                          // danger: a mount on an emptyDir directory (or one the kubelet tears down as an emptyDir) that is not provably its own
	reasonStackedMounts                         // danger: several mounts stacked on an emptyDir directory (or one the kubelet tears down as an emptyDir)
	reasonSubpathForeignMount                   // danger: a mount in the subPath tree that is not the volume's own bind
	reasonUncertain                             // unknown: the kernel cannot say whether it is a mount point
	reasonError                                 // error: could not be examined
	reasonAdoptedMount                          // in-use: an emptyDir's own tmpfs/hugetlbfs, mounted by the kubelet before nodevol and adopted by SetUp
)

func (c reasonCode) String() string {
	switch c {
	case reasonNotMounted:
		return "not-mounted"
	case reasonGone:
		return "gone"
	case reasonOwnMount:
		return "own-mount"
	case reasonPluginMount:
		return "plugin-mount"
	case reasonNestedMount:
		return "nested-mount"
	case reasonForeignMount:
		return "foreign-mount"
	case reasonStackedMounts:
		return "stacked-mounts"
	case reasonSubpathForeignMount:
		return "subpath-foreign-mount"
	case reasonUncertain:
		return "uncertain"
	case reasonError:
		return "error"
	case reasonAdoptedMount:
		return "adopted-mount"
	}
	return fmt.Sprintf("reasonCode(%d)", int(c))
}

// MarshalText writes the code's name.
func (c reasonCode) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// verdict is the verdict the code belongs to.
func (c reasonCode) verdict() scanVerdict {
	switch c {
	case reasonNotMounted, reasonGone:
		return verdictOK
	case reasonOwnMount, reasonAdoptedMount, reasonPluginMount:
		return verdictInUse
	case reasonNestedMount, reasonForeignMount, reasonStackedMounts, reasonSubpathForeignMount:
		return verdictDanger
	case reasonUncertain:
		return verdictUnknown
	}
	return verdictError
}
