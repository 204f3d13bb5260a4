package harness

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// debianBinary is a program the e2e runs, at the path its Debian package
// installs it to. The e2e runs exactly these paths (never a PATH lookup),
// so a binary installed by hand elsewhere cannot stand in for it.
type debianBinary struct {
	Path    string
	Package string
}

// binaries are the runtime's programs: containerd 1.6 and runc 1.1 from
// Debian bookworm, busybox-static for the busybox image, and etcd 3.4 for
// the control plane.
var binaries = []debianBinary{
	{"/usr/bin/containerd", "containerd"},
	{"/usr/bin/containerd-shim-runc-v2", "containerd"},
	{"/usr/bin/ctr", "containerd"},
	{"/usr/sbin/runc", "runc"},
	{"/bin/busybox", "busybox-static"},
	{etcdBinary, "etcd-server"},
}

// clusterBinaries are what a whole cluster runs besides: Debian's CNI
// plugins for the pod network, iproute2's ip for the bridge, the veth pairs
// and the nodes' network namespaces, util-linux's unshare, which makes a
// node's mount namespace, and its nsenter, which runs each node's
// containerd and kubelet in the node's namespaces; mount's mount and umount
// for the NAS in a node.
var clusterBinaries = []debianBinary{
	{cniBinDir + "/bridge", "containernetworking-plugins"},
	{cniBinDir + "/host-local", "containernetworking-plugins"},
	{cniBinDir + "/loopback", "containernetworking-plugins"},
	{ipBinary, "iproute2"},
	{"/usr/bin/nsenter", "util-linux"},
	{"/usr/bin/unshare", "util-linux"},
	{"/bin/mount", "mount"},
	{"/bin/umount", "mount"},
}

// debianVersion is the installed version of a Debian package, or
// "unknown".
func debianVersion(ctx context.Context, pkg string) string {
	out, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${Version}", pkg).Output()
	if err != nil || len(out) == 0 {
		return "unknown"
	}
	return pkg + " " + string(out)
}

// etcdBinary is Debian's etcd (package etcd-server, 3.4.23 in bookworm).
// kube-apiserver 1.37 works with it; it only skips the watch-progress
// requests that etcd 3.4 does not serve.
const etcdBinary = "/usr/bin/etcd"

// ErrNotFromPackage is matched by the error for a runtime binary that is
// present but that no Debian package owns.
var ErrNotFromPackage = errors.New("not installed by its Debian package")

// ensurePackages installs the Debian packages whose binaries are missing
// and checks that every binary belongs to its package (dpkg -S).
func ensurePackages(ctx context.Context, binaries []debianBinary, log *logger) error {
	var missing []string
	for _, b := range binaries {
		if _, err := os.Stat(b.Path); err != nil && !slices.Contains(missing, b.Package) {
			missing = append(missing, b.Package)
		}
	}
	if len(missing) > 0 {
		log.Printf("apt-get install %s", strings.Join(missing, " "))
		if out, err := exec.CommandContext(ctx, "apt-get", "update", "-q").CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get update: %w\n%s", err, out)
		}
		// Install, never remove (a Docker host's containerd.io conflicts
		// with Debian's containerd: apt-get then fails instead of removing
		// it), and start no service (containerd, etcd): the run starts its
		// own in its namespace.
		if undo, err := denyServiceStarts(); err != nil {
			return err
		} else {
			defer undo()
		}
		args := append([]string{"install", "-y", "-q", "--no-install-recommends", "--no-remove"}, missing...)
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get install %s: %w\n%s", strings.Join(missing, " "), err, out)
		}
	}
	for _, b := range binaries {
		out, err := exec.CommandContext(ctx, "dpkg", "-S", b.Path).Output()
		if err != nil || !strings.HasPrefix(string(out), b.Package+":") {
			return fmt.Errorf("%s (want package %s, dpkg -S says %q): %w", b.Path, b.Package, strings.TrimSpace(string(out)), ErrNotFromPackage)
		}
	}
	return nil
}

// policyRCD is Debian's hook for maintainer scripts that start services
// (invoke-rc.d, deb-systemd-invoke): exit status 101 means "not allowed".
const policyRCD = "/usr/sbin/policy-rc.d"

// denyServiceStarts installs a policy-rc.d that forbids every service
// start, unless the host has one of its own (its policy stands); the
// returned function removes it again.
func denyServiceStarts() (func(), error) {
	f, err := os.OpenFile(policyRCD, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if errors.Is(err, fs.ErrExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, err
	}
	_, werr := f.WriteString("#!/bin/sh\n# nodevol e2e: installing packages, starting no service\nexit 101\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	undo := func() { _ = os.Remove(policyRCD) }
	if werr != nil {
		undo()
		return nil, werr
	}
	return undo, nil
}
