package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodevol/nodevol/volume"
)

// ServeOptions says where the driver serves.
type ServeOptions struct {
	// Endpoint is the CSI socket's path as this process sees it
	// (/csi/csi.sock in the DaemonSet).
	Endpoint string
	// KubeletEndpoint is the same socket's path as the kubelet sees it,
	// which the registration gives the kubelet
	// (/var/lib/kubelet/plugins/<driver name>/csi.sock); Endpoint when empty.
	KubeletEndpoint string
	// RegistrationDir is the kubelet's plugin-registration directory
	// (<kubelet root>/plugins_registry) as this process sees it; the
	// driver serves the registration API on <name>-reg.sock there, so no
	// node-driver-registrar sidecar is needed. Empty: no registration (a
	// test, or a registrar of one's own).
	RegistrationDir string
	// ShutdownGrace bounds how long in-flight calls may finish once the
	// context is done; 10 s when zero.
	ShutdownGrace time.Duration
	// RootLock is the kubelet root's lock for the driver's name
	// (volume.LockRoot with volume.LockCSIDriver(name)) when the caller
	// took it already — before anything else it starts, as nodevol-csi
	// does — and keeps it; nil: Serve takes it, and releases it when it
	// returns.
	RootLock *volume.RootLock
}

// ErrSocketPath is matched by Serve's error when a socket path holds
// something that is not a socket (it is never removed).
var ErrSocketPath = errors.New("socket path holds something other than a socket")

// Serve serves the CSI Identity and Node services on opts.Endpoint and, with
// opts.RegistrationDir, the kubelet's plugin-registration API, until ctx is
// done. Then it stops accepting calls, lets the calls in flight finish
// (up to ShutdownGrace) and removes both sockets: the kubelet drops the
// registration, and takes it again when the driver is back. A socket left
// by an earlier run is replaced; anything else at a socket path is an
// error.
//
// First it takes the kubelet root's lock for the driver's name
// (volume.LockCSIDriver; see opts.RootLock), held until it returns or the
// process ends: a second process serving the same driver on the same root
// would replace the first one's sockets and publish and unpublish the
// same targets at once. Its Serve returns a *volume.RootLockedError naming
// the first, having touched nothing. Drivers of other names, and a volume
// manager, have locks of their own.
func (d *Driver) Serve(ctx context.Context, opts ServeOptions) error {
	if opts.KubeletEndpoint == "" {
		opts.KubeletEndpoint = opts.Endpoint
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = 10 * time.Second
	}
	if opts.RootLock == nil {
		lock, err := d.LockRoot()
		if err != nil {
			return err
		}
		defer lock.Release()
	} else if h := opts.RootLock.Holder(); h.Owner != volume.LockCSIDriver(d.name) || filepath.Dir(opts.RootLock.Path()) != d.layout.Root() {
		return fmt.Errorf("%w: ServeOptions.RootLock is the %s lock at %s, not the %s lock of kubelet root %s",
			ErrConfig, h.Owner, opts.RootLock.Path(), volume.LockCSIDriver(d.name), d.layout.Root())
	}
	csiSrv := grpc.NewServer(grpc.UnaryInterceptor(d.Interceptor()))
	d.Register(csiSrv)
	csiLis, removeCSI, err := listenUnix(opts.Endpoint)
	if err != nil {
		return err
	}
	defer removeCSI()
	servers := []*grpc.Server{csiSrv}
	errc := make(chan error, 2)
	go func() { errc <- csiSrv.Serve(csiLis) }()
	if opts.RegistrationDir != "" {
		regSrv := grpc.NewServer()
		registerapi.RegisterRegistrationServer(regSrv, &registration{d: d, endpoint: opts.KubeletEndpoint})
		regPath := filepath.Join(opts.RegistrationDir, d.name+"-reg.sock")
		regLis, removeReg, err := listenUnix(regPath)
		if err != nil {
			csiSrv.Stop()
			return err
		}
		defer removeReg()
		servers = append(servers, regSrv)
		go func() { errc <- regSrv.Serve(regLis) }()
		d.log.Info("Serving the plugin-registration API", "socket", regPath, "endpoint", opts.KubeletEndpoint)
	}
	d.log.Info("Serving CSI", "driver", d.name, "version", d.version, "node", d.nodeID, "socket", opts.Endpoint, "kubeletRoot", d.layout.Root())
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	for _, s := range servers {
		stopGracefully(s, opts.ShutdownGrace)
	}
	if err != nil {
		return fmt.Errorf("serving CSI: %w", err)
	}
	d.log.Info("Stopped serving")
	return nil
}

// LockRoot takes the kubelet root's lock for the driver's name, as Serve
// does (see there), for a caller that must hold it before it starts
// anything else; it passes it to Serve in ServeOptions.RootLock.
func (d *Driver) LockRoot() (*volume.RootLock, error) {
	return volume.LockRoot(d.layout, volume.LockCSIDriver(d.name), volume.LockOptions{})
}

// stopGracefully stops s, letting calls in flight finish for up to grace.
func stopGracefully(s *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		s.Stop()
	}
}

// listenUnix listens on the unix socket path, replacing a socket an earlier
// run left there (never anything else), accessible to its owner only: the
// socket's mode is set to 0600 before bind(2) creates its file (Linux
// gives the file the socket's mode), so it is never reachable with the
// umask's, and no temporary name appears in the directory (the kubelet
// watches the registration directory for sockets). bind never replaces
// what took the path meanwhile. The listener does not unlink the path when
// it closes; remove does, only while the path still holds the socket made
// here: a file put there meanwhile, or the socket of a newer instance of
// the driver that replaced this one's, stays.
func listenUnix(path string) (lis net.Listener, remove func(), err error) {
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() == fs.ModeSocket:
		if err := os.Remove(path); err != nil {
			return nil, nil, err
		}
	case err == nil:
		return nil, nil, fmt.Errorf("%w: %s is a %s", ErrSocketPath, path, fi.Mode().Type())
	case !errors.Is(err, fs.ErrNotExist):
		return nil, nil, err
	}
	fd, err := unixSocket()
	if err != nil {
		return nil, nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), path) // closed below: the listener has its own descriptor
	defer f.Close()
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return nil, nil, os.NewSyscallError("fchmod", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		if errors.Is(err, unix.EADDRINUSE) {
			return nil, nil, fmt.Errorf("%w: something was put at %s meanwhile", ErrSocketPath, path)
		}
		return nil, nil, &os.PathError{Op: "bind", Path: path, Err: err}
	}
	made, err := os.Lstat(path)
	if err != nil {
		return nil, nil, err
	}
	remove = func() {
		if cur, err := os.Lstat(path); err == nil && os.SameFile(cur, made) {
			os.Remove(path)
		}
	}
	if made.Mode().Perm()&0o077 != 0 {
		remove()
		return nil, nil, fmt.Errorf("%s: mode %v after bind; want owner-only", path, made.Mode().Perm())
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		remove()
		return nil, nil, os.NewSyscallError("listen", err)
	}
	lis, err = net.FileListener(f)
	if err != nil {
		remove()
		return nil, nil, err
	}
	return lis, remove, nil
}

// registration is the kubelet's plugin-registration API: the kubelet finds
// <name>-reg.sock in its plugins_registry directory, asks GetInfo, checks
// the driver over its endpoint (NodeGetInfo), and reports the outcome.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	d        *Driver
	endpoint string
}

// SupportedVersions are the CSI versions the kubelet may speak to the
// driver.
var supportedVersions = []string{"1.0.0"}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.d.name, Endpoint: r.endpoint, SupportedVersions: supportedVersions}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.d.registered.Store(st.GetPluginRegistered())
	if st.GetPluginRegistered() {
		r.d.log.Info("Registered with the kubelet")
	} else {
		r.d.log.Error(errors.New(st.GetError()), "The kubelet refused the registration")
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
