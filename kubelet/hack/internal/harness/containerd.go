package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// runtimePath is the PATH of every process the namespace starts: the
// Debian packages' directories only, so containerd finds Debian's runc
// and shim and nothing installed by hand.
const runtimePath = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"

// containerd is one containerd daemon, private to one kubelet run.
type containerd struct {
	dir    string
	socket string
	// cmdArgs run it: the node's nsenter prefix, containerd and its flags.
	cmdArgs []string
	cmd     *exec.Cmd
	exited  chan struct{}
	log     *logger
}

// containerdConfig is the version 2 config of containerd 1.6: every path
// under dir, Debian's runc with cgroupfs, the local pause image as the
// sandbox image, and restrict_oom_score_adj (root here lacks
// CAP_SYS_RESOURCE: runc fails every sandbox that asks for a lower
// oom_score_adj than containerd's own, with "can't get final child's PID
// from pipe: EOF").
const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = %[3]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
`

// startContainerd starts containerd with its state in dir, waits until it
// answers, and imports the image tarballs: the one-node setup, with no CNI
// (hostNetwork pods only) and the local pause image as the sandbox image.
func startContainerd(ctx context.Context, dir string, images []string, log *logger) (*containerd, error) {
	return startContainerdFor(ctx, containerdSpec{
		dir: dir, images: images, sandboxImage: pauseImage,
		cniBin: filepath.Join(dir, "cni/bin"), cniConf: filepath.Join(dir, "cni/net.d"),
	}, log)
}

// containerdSpec says where a containerd keeps its state and how it runs.
type containerdSpec struct {
	dir          string
	images       []string // OCI layout tarballs to import
	sandboxImage string   // one of the imported images
	// cniBin and cniConf are the CNI plugin and configuration
	// directories; a conf directory with no conflist means no pod network.
	cniBin, cniConf string
	// enter is the command prefix that runs a process in the node's
	// namespaces (nsenter); nil: the run's own.
	enter []string
}

// startContainerdFor starts containerd as spec says, waits until it
// answers, and imports the images.
func startContainerdFor(ctx context.Context, spec containerdSpec, log *logger) (*containerd, error) {
	dir := spec.dir
	c := &containerd{dir: dir, socket: filepath.Join(dir, "containerd.sock"), log: log}
	for _, d := range []string{filepath.Join(dir, "root"), filepath.Join(dir, "state"), filepath.Join(dir, "opt"), spec.cniBin, spec.cniConf} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	cfg := fmt.Sprintf(containerdConfig, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.socket,
		filepath.Join(dir, "opt"), spec.sandboxImage, spec.cniBin, spec.cniConf)
	cfgPath := filepath.Join(dir, "containerd.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	c.cmdArgs = append(slices.Clone(spec.enter), "/usr/bin/containerd", "--config", cfgPath)
	if err := c.launch(ctx); err != nil {
		return nil, err
	}
	for _, img := range spec.images {
		if err := c.ctr(ctx, "-n", "k8s.io", "images", "import", img); err != nil {
			c.stop()
			return nil, fmt.Errorf("importing %s: %w", img, err)
		}
	}
	return c, nil
}

// launch starts containerd (appending to its log) and waits until it
// answers.
func (c *containerd) launch(ctx context.Context) error {
	logf, err := os.OpenFile(filepath.Join(c.dir, "containerd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	c.cmd = exec.Command(c.cmdArgs[0], c.cmdArgs[1:]...)
	c.cmd.Env = []string{runtimePath}
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("starting containerd: %w", err)
	}
	exited := make(chan struct{})
	c.exited = exited
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(exited) }(c.cmd)
	err = poll(ctx, 30*time.Second, func() (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("containerd exited: %s (see %s)", c.cmd.ProcessState, logf.Name())
		default:
		}
		return c.ctr(ctx, "version") == nil, nil
	})
	if err != nil {
		c.stop()
		return fmt.Errorf("containerd did not come up: %w", err)
	}
	return nil
}

// restart stops containerd (SIGTERM, as a service manager's restart does)
// and starts it again with the same configuration. The containers' shims
// and processes are not its children and keep running.
func (c *containerd) restart(ctx context.Context) error {
	stopProcess(c.cmd, c.exited, 10*time.Second)
	return c.launch(ctx)
}

// ctr runs Debian's ctr against this containerd, for at most 10 seconds
// (ctr can hang on a containerd that is stopping).
func (c *containerd) ctr(ctx context.Context, args ...string) error {
	_, err := c.ctrOutput(ctx, args...)
	return err
}

// ctrOutput is ctr's output (stdout and stderr) when it succeeds.
func (c *containerd) ctrOutput(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/ctr", append([]string{"-a", c.socket}, args...)...)
	cmd.Env = []string{runtimePath}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// stop kills the containers' tasks that are left and stops containerd.
// Whatever survives dies with the namespace.
func (c *containerd) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/ctr", "-a", c.socket, "-n", "k8s.io", "tasks", "ls", "-q")
	cmd.Env = []string{runtimePath}
	if out, err := cmd.Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			if err := c.ctr(ctx, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id); err != nil {
				c.log.Printf("note: %v", err)
			}
		}
	}
	stopProcess(c.cmd, c.exited, 10*time.Second)
}

// commandIn is the command that runs bin with args, through the enter
// prefix when there is one (nsenter into a node's namespaces, which then
// execs bin: the process is bin's).
func commandIn(enter []string, bin string, args ...string) *exec.Cmd {
	if len(enter) == 0 {
		return exec.Command(bin, args...)
	}
	return exec.Command(enter[0], append(append(append([]string{}, enter[1:]...), bin), args...)...)
}

// stopProcess sends SIGTERM, and SIGKILL when the process is still there
// after grace.
func stopProcess(cmd *exec.Cmd, exited <-chan struct{}, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}
