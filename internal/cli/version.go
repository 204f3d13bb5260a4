package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/mountdetect"
)

// releaseVersion is the version a release stamps into the binary
// (hack/release, with -ldflags "-X
// github.com/nodevol/nodevol/internal/cli.releaseVersion=v1.2.3"). When
// set it is the version reported, in place of the build info's module
// version, which a build from a checkout leaves "(devel)" or a
// pseudo-version.
var releaseVersion string

// versionInfo is what "nodevol version" reports. The exported fields are
// the --json output; what the build did not record is null, never a guess.
type versionInfo struct {
	Module  string `json:"module"`  // the main module's path
	Version string `json:"version"` // its version: "(devel)" for a build from a checkout
	// The VCS state the go command stamped into the binary; null when it
	// did not (go run, go build -buildvcs=false, no checkout).
	Revision  *string `json:"revision"`
	Time      *string `json:"time"`
	Modified  *bool   `json:"modified"`
	GoVersion string  `json:"goVersion"`
	OS        string  `json:"os"`
	Arch      string  `json:"arch"`
	Kernel    *string `json:"kernel"` // the kernel release (uname -r)
	// KernelFeatures are the kernel features nodevol uses, each probed on
	// this machine by the code that relies on it.
	KernelFeatures []kernelFeature `json:"kernelFeatures"`
}

// kernelFeature is one kernel feature and whether this machine has it.
type kernelFeature struct {
	Name      string       `json:"name"`             // "statx-mnt-id-unique"
	About     string       `json:"about"`            // what it is, and the Linux release that brought it
	Available featureState `json:"available"`        // "yes", "no" or "unknown"
	Detail    string       `json:"detail,omitempty"` // why it is unknown (or why not)
}

// featureState is whether a kernel feature is there.
type featureState int

const (
	featureUnknown featureState = iota // it could not be probed here
	featureYes
	featureNo
)

func (s featureState) String() string {
	switch s {
	case featureUnknown:
		return "unknown"
	case featureYes:
		return "yes"
	case featureNo:
		return "no"
	}
	return fmt.Sprintf("featureState(%d)", int(s))
}

func (s featureState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// newVersionInfo reads the build from bi (debug.ReadBuildInfo's result;
// ok false when the binary carries none) and the rest from the running
// system.
func newVersionInfo(bi *debug.BuildInfo, ok bool) versionInfo {
	v := versionInfo{
		Module: "unknown", Version: "unknown",
		GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		KernelFeatures: kernelFeatures(),
	}
	if rel := kernelRelease(); rel != "" {
		v.Kernel = &rel
	}
	if !ok || bi == nil {
		if releaseVersion != "" {
			v.Version = releaseVersion
		}
		return v
	}
	if bi.Main.Path != "" {
		v.Module = bi.Main.Path
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	if releaseVersion != "" {
		v.Version = releaseVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = &s.Value
		case "vcs.time":
			v.Time = &s.Value
		case "vcs.modified":
			modified := s.Value == "true"
			v.Modified = &modified
		}
	}
	return v
}

// kernelFeatures probes the kernel features nodevol uses, each with the
// package that relies on it.
func kernelFeatures() []kernelFeature {
	k := mountdetect.Kernel()
	found := func(name, about string, have bool) kernelFeature {
		if have {
			return kernelFeature{Name: name, About: about, Available: featureYes}
		}
		return kernelFeature{Name: name, About: about, Available: featureNo}
	}
	probed := func(name, about string, have bool, err error) kernelFeature {
		f := found(name, about, have)
		switch {
		case errors.Is(err, errors.ErrUnsupported):
			f.Available, f.Detail = featureNo, err.Error()
		case err != nil:
			f.Available, f.Detail = featureUnknown, "cannot tell: "+err.Error()
			if errors.Is(err, os.ErrPermission) {
				f.Detail += " (asking needs CAP_SYS_ADMIN: run as root)"
			}
		}
		return f
	}
	mountAPI, mountAPIErr := emptydir.MountAPI()
	noswap, noswapErr := emptydir.TmpfsNoswap()
	return []kernelFeature{
		found("statx-mnt-id-unique", "statx unique mount IDs (STATX_MNT_ID_UNIQUE, Linux 6.8)", k.StatxMountIDUnique),
		found("statx-mnt-id", "statx mount IDs (STATX_MNT_ID, Linux 5.8)", k.StatxMountID),
		found("openat2", "openat2 RESOLVE_NO_XDEV (Linux 5.6)", k.Openat2),
		probed("mount-api", "fsopen/fsmount, the new mount API (Linux 5.2)", mountAPI, mountAPIErr),
		probed("tmpfs-noswap", "tmpfs noswap (Linux 6.4)", noswap, noswapErr),
		found("quotactl-fd", "quotactl_fd (Linux 5.14)", fsquota.QuotactlFD()),
		found("mnt-ns-init-ino", "the initial mount namespace's fixed inode (MNT_NS_INIT_INO, Linux 6.18; told by the kernel release)", mountdetect.InitialMountNamespaceInode()),
	}
}

// writeVersionHuman prints v for people; what is not known says so.
func writeVersionHuman(w io.Writer, v *versionInfo) {
	unknown := func(s *string, why string) string {
		if s == nil {
			return "unknown" + why
		}
		return *s
	}
	noVCS := " (the build recorded no VCS state: go run, -buildvcs=false or no checkout)"
	modified := "unknown"
	if v.Modified != nil {
		modified = yesNo(*v.Modified)
	}
	fmt.Fprintf(w, "nodevol %s\n", display(v.Version))
	line := func(label, value string) { fmt.Fprintf(w, "  %-10s%s\n", label+":", display(value)) }
	line("module", v.Module)
	line("revision", unknown(v.Revision, noVCS))
	line("time", unknown(v.Time, ""))
	line("modified", modified)
	line("go", v.GoVersion)
	line("platform", v.OS+"/"+v.Arch)
	line("kernel", unknown(v.Kernel, ""))
	fmt.Fprintln(w, "kernel features nodevol uses, probed on this machine:")
	for _, f := range v.KernelFeatures {
		detail := ""
		if f.Detail != "" {
			detail = ": " + f.Detail
		}
		fmt.Fprintf(w, "  %-8s %s%s\n", f.Available, f.About, display(detail))
	}
}

// versionHelp is the help of "nodevol version", after its usage line.
const versionHelp = `Print nodevol's version: its module and version, the VCS revision, time and
state it was built from ("unknown" when the build did not record them: go
run, -buildvcs=false), the Go version, the platform and the kernel release;
then each kernel feature nodevol uses and whether this machine has it, as
the code that relies on it finds out now (probed, not inferred from the
release, except where said):

  statx STATX_MNT_ID_UNIQUE  never-reused mount IDs (mount-boundary checks,
                             a Memory volume's recorded identity)
  statx STATX_MNT_ID         mount IDs, the fallback
  openat2 RESOLVE_NO_XDEV    the fallback when statx has no mount IDs
  fsopen/fsmount             how SetUp makes Memory and HugePages volumes
  tmpfs noswap               given to Memory volumes when tmpfs takes it
  quotactl_fd                project-quota limits and usage on the
                             directory's descriptor (older: quotactl on the
                             block device)
  MNT_NS_INIT_INO            the initial mount namespace's fixed inode, how
                             the mount namespace is told when PID 1 cannot
                             be compared (the one feature told by the
                             kernel release: it cannot be probed from
                             another namespace)

"unknown" means it could not be asked here: without CAP_SYS_ADMIN the mount
API cannot be tried.

Exit status: 0, or 2 on bad usage.`

func runVersion(fs *flagSet, args []string, stdout, stderr io.Writer) int {
	asJSON := fs.Bool("json", false, "print one JSON object")
	extra, code := parseArgs(fs, args)
	if code >= 0 {
		return code
	}
	if len(extra) > 0 {
		return usageError(fs, stderr, "version takes no arguments (got %q)", extra[0])
	}
	v := newVersionInfo(debug.ReadBuildInfo())
	if *asJSON {
		if err := newJSONEncoder(stdout).Encode(&v); err != nil {
			fmt.Fprintf(stderr, "nodevol version: write report: %v\n", err)
			return ExitError
		}
		return ExitOK
	}
	writeVersionHuman(stdout, &v)
	return ExitOK
}
