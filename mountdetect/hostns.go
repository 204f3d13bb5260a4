package mountdetect

import (
	"errors"
	"fmt"
)

// MountNamespaceState says whether this process runs in the host's mount
// namespace. The zero value is MountNamespaceUnknown.
type MountNamespaceState int

const (
	// MountNamespaceUnknown: it could not be told; MountNamespace.Err says
	// why.
	MountNamespaceUnknown MountNamespaceState = iota
	// MountNamespaceHost: this process sees the host's mount table.
	MountNamespaceHost
	// MountNamespaceForeign: this process runs in another mount namespace
	// (a container's, a private one), whose mount table can differ from
	// the host's.
	MountNamespaceForeign
)

func (s MountNamespaceState) String() string {
	switch s {
	case MountNamespaceUnknown:
		return "unknown"
	case MountNamespaceHost:
		return "host"
	case MountNamespaceForeign:
		return "foreign"
	}
	return fmt.Sprintf("MountNamespaceState(%d)", int(s))
}

// MarshalText makes the state a string in JSON: "host", "foreign" or
// "unknown".
func (s MountNamespaceState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// NamespaceEvidence says how CheckMountNamespace told.
type NamespaceEvidence int

const (
	// EvidenceNone: it could not be told.
	EvidenceNone NamespaceEvidence = iota
	// EvidencePID1: this process's mount namespace was compared with that
	// of PID 1 of the proc filesystem (HostProc), PID 1 being the init of
	// the initial PID namespace: the host's init.
	EvidencePID1
	// EvidenceInitialInode: PID 1 could not be compared (MountNamespace.Err
	// says why), and the kernel numbers the initial mount namespace, the
	// host's, with a fixed inode (Linux 6.18 and later; on older kernels
	// only a process that is in it can be recognised so).
	EvidenceInitialInode
)

func (e NamespaceEvidence) String() string {
	switch e {
	case EvidenceNone:
		return "none"
	case EvidencePID1:
		return "pid1"
	case EvidenceInitialInode:
		return "initial-inode"
	}
	return fmt.Sprintf("NamespaceEvidence(%d)", int(e))
}

// MountNamespaceID identifies a mount namespace: the device and inode
// number of its file under /proc/PID/ns. readlink(1) shows the inode
// number, as in mnt:[4026531832].
type MountNamespaceID struct {
	Dev, Ino uint64
}

// String formats the ID as readlink /proc/PID/ns/mnt does: mnt:[inode].
func (id MountNamespaceID) String() string { return fmt.Sprintf("mnt:[%d]", id.Ino) }

// MountNamespace is what CheckMountNamespace found out.
type MountNamespace struct {
	State MountNamespaceState
	// By says how the state was told (EvidenceNone when it is unknown).
	By NamespaceEvidence
	// Self is this process's mount namespace; zero when it could not be
	// read.
	Self MountNamespaceID
	// Host is the namespace Self was compared with: PID 1's, or the
	// initial one (By says which); zero when the state is unknown.
	Host MountNamespaceID
	// Err is why the state is unknown, or, when By is
	// EvidenceInitialInode, why PID 1 could not be compared; nil when
	// PID 1 was. errors.Is matches ErrPID1Hidden, ErrNotHostInit,
	// ErrNotNamespace, ErrUnsupported and the *os.PathError of the file
	// that could not be read.
	Err error
}

// String says in words what was found, for a warning or a log line.
func (ns MountNamespace) String() string {
	switch {
	case ns.State == MountNamespaceHost && ns.By == EvidencePID1:
		return fmt.Sprintf("the host's mount namespace (%s, PID 1's)", ns.Self)
	case ns.State == MountNamespaceHost:
		return fmt.Sprintf("the host's mount namespace (%s, the initial one)", ns.Self)
	case ns.State == MountNamespaceForeign && ns.By == EvidencePID1:
		return fmt.Sprintf("not the host's mount namespace (this process: %s; PID 1: %s)", ns.Self, ns.Host)
	case ns.State == MountNamespaceForeign:
		return fmt.Sprintf("not the host's mount namespace (this process: %s; the host's, the initial one: %s)", ns.Self, ns.Host)
	case ns.Err != nil:
		return "cannot tell whether this is the host's mount namespace: " + ns.Err.Error()
	}
	return "cannot tell whether this is the host's mount namespace"
}

// ErrPID1Hidden is matched by MountNamespace.Err when PID 1's namespaces
// may not be read by this process: it takes root (ptrace access to PID 1),
// and proc's hidepid= option can hide PID 1 altogether.
var ErrPID1Hidden = errors.New("PID 1's namespaces are hidden from this process (reading them takes root)")

// ErrNotHostInit is matched by MountNamespace.Err when PID 1 of the proc
// filesystem is not the host's init but the init of another PID namespace:
// this process runs in a container with a PID namespace of its own, whose
// /proc shows the container's processes only.
var ErrNotHostInit = errors.New("PID 1 is not the host's init: it runs in a PID namespace other than the initial one (a container's)")

// ErrNotNamespace is matched by MountNamespace.Err when a file that should
// be a namespace (/proc/PID/ns/mnt, .../pid) is not one of the expected
// type: the proc directory given is not a proc filesystem.
var ErrNotNamespace = errors.New("not a namespace of the expected type")

// NamespaceOption configures CheckMountNamespace.
type NamespaceOption interface{ applyNamespace(*namespaceConfig) }

type namespaceConfig struct {
	hostProc string // where the proc filesystem whose PID 1 is compared is mounted
	selfProc string // where this process's own proc is mounted
	// byInode tells what the inode of this process's own mount namespace
	// says when PID 1 could not be compared: nil is the kernel's numbering
	// (stateByInode); tests replace it to reach every answer on any kernel.
	byInode func(self MountNamespaceID) MountNamespaceState
}

type namespaceOptionFunc func(*namespaceConfig)

func (f namespaceOptionFunc) applyNamespace(c *namespaceConfig) { f(c) }

// HostProc names the proc filesystem whose PID 1 is the host's init
// (default "/proc"). A container with a PID namespace of its own sees its
// own processes in /proc, so its PID 1 is not the host's init; a DaemonSet
// that mounts the host's /proc (a hostPath volume at /host/proc, say)
// names it here. The directory is trusted like the parents of a path given
// to RemoveAll; CheckMountNamespace checks that the files it reads there
// are namespaces of the expected type, and that PID 1's PID namespace is
// the initial one.
func HostProc(dir string) NamespaceOption {
	return namespaceOptionFunc(func(c *namespaceConfig) { c.hostProc = dir })
}

// CheckMountNamespace reports whether this process runs in the host's
// mount namespace: the namespace of PID 1, the host's init.
//
// A process in another mount namespace reads another mount table: a NAS
// mounted in the host's namespace only (after a container started, or
// with private propagation) is not there, so a directory that holds it on
// the host looks empty of mounts here, IsMountPoint and NestedMounts say
// so, and RemoveAll removes the directory — on Linux 3.18 and later the
// kernel then detaches the host's mount from it (the NAS's data is not
// touched, but the host loses the mount). Callers about to remove
// something on behalf of the host should refuse unless the state is
// MountNamespaceHost.
//
// How it tells, in order:
//
//  1. Its own mount namespace, /proc/thread-self/ns/mnt (that of the
//     threads goroutines run on; the main thread's can differ), is
//     compared (device and inode) with that of PID 1 of the proc
//     filesystem HostProc names (/proc by default), provided PID 1's PID
//     namespace is the initial one (/proc/1/ns/pid has inode
//     0xEFFFFFFC, PID_NS_INIT_INO, fixed since Linux 3.8): then PID 1 is
//     the host's init. Reading another process's namespaces takes root
//     (ptrace access), so an unprivileged process cannot (ErrPID1Hidden);
//     in a container with a PID namespace of its own, /proc/1 is the
//     container's init (ErrNotHostInit).
//  2. When PID 1 could not be compared: Linux 6.18 and later give the
//     initial mount namespace the fixed inode 0xEFFFFFF8 (MNT_NS_INIT_INO)
//     and every other one a number from 0xF0000000 up, so the inode of
//     this process's own namespace, which any process may read, tells
//     (EvidenceInitialInode). Older kernels number every mount namespace
//     dynamically: there, a namespace with that inode is still the
//     initial one, but any other number could be too.
//  3. Otherwise the state is MountNamespaceUnknown and Err says why.
//
// Every file is opened once and checked to be a namespace of the expected
// type (nsfs, NS_GET_NSTYPE), so a directory that is not a proc
// filesystem cannot pass for one. The answer is about the moment of the
// call: a process that changes namespace later (setns) must ask again.
// On other operating systems the state is unknown and Err matches
// ErrUnsupported.
func CheckMountNamespace(opts ...NamespaceOption) MountNamespace {
	c := namespaceConfig{selfProc: "/proc"}
	for _, o := range opts {
		o.applyNamespace(&c)
	}
	if c.hostProc == "" {
		c.hostProc = "/proc"
	}
	return checkMountNamespace(&c)
}

// InitialMountNamespaceInode reports whether the running kernel gives the
// initial mount namespace, the host's, the fixed inode MNT_NS_INIT_INO
// (Linux 6.18), which CheckMountNamespace relies on when PID 1 cannot be
// compared (EvidenceInitialInode). Unlike Kernel's features it is told by
// the kernel release, as CheckMountNamespace tells it: a process outside
// the initial namespace cannot see that namespace's inode to probe it.
// False on other operating systems.
func InitialMountNamespaceInode() bool { return kernelNumbersInitialMountNamespace() }
