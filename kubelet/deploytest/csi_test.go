package deploytest

import (
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/klog/v2/textlogger"

	"github.com/nodevol/nodevol/httpserver"
)

// csiMain is nodevol-csi's command, whose flag set the DaemonSet's args
// are parsed with. It lives in the csi/ module, whose gRPC and CSI
// dependencies this module does not have: the test reads its flag
// definitions from the source instead of importing or running it.
const csiMain = "../../csi/cmd/nodevol-csi/main.go"

// csiShutdownGrace is how long nodevol-csi lets calls in flight finish
// after SIGTERM (driver.ServeOptions.ShutdownGrace's default); the pod's
// termination grace period must leave room for it and the exit.
const csiShutdownGrace = 10 * time.Second

// csiRestrictedExceptions are the Pod Security Standard checks the
// nodevol-csi pod fails at "restricted", each for a privilege
// docs/deploy.md explains: privileged (which Bidirectional propagation
// needs, and which brings every capability and privilege escalation), the
// three hostPaths ("restricted volume types"), uid 0. Anything else (a host port, host namespaces,
// AppArmor Unconfined, ...) is a privilege nobody argued for.
var csiRestrictedExceptions = []string{
	"privileged",
	"allowPrivilegeEscalation != false",
	"unrestricted capabilities",
	"restricted volume types",
	"runAsNonRoot != true",
	"runAsUser=0",
}

// errFlagSource is matched by csiFlagSet's error when nodevol-csi's source
// does not define its flags the way csiFlagSet reads them.
var errFlagSource = errors.New("cannot read nodevol-csi's flags from its source")

// csiFlagSet is a flag set with the flags nodevol-csi defines, read from
// the source of its command: every call <fs>.String("name", ...),
// <fs>.Bool, <fs>.Int64, ... (or <fs>.StringVar(p, "name", ...)) on the
// *flag.FlagSet made by flag.NewFlagSet, and klog's textlogger flags when
// it adds them (<cfg>.AddFlags(<fs>)). Parsing args with it is parsing
// them as nodevol-csi does: a flag it does not define, or a value its
// type refuses, is an error. own lists the flags of nodevol-csi's own
// (not klog's), which the DaemonSet must all set.
// identName is e's name when it is an identifier, else "".
func identName(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

func csiFlagSet(file string) (fs *flag.FlagSet, own []string, err error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errFlagSource, err)
	}
	fs = flag.NewFlagSet("nodevol-csi", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var fsName string // the *flag.FlagSet variable
	ast.Inspect(f, func(n ast.Node) bool {
		if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == 1 && len(as.Rhs) == 1 {
			if call, ok := as.Rhs[0].(*ast.CallExpr); ok && selectorIs(call.Fun, "flag", "NewFlagSet") {
				if id, ok := as.Lhs[0].(*ast.Ident); ok {
					fsName = id.Name
				}
			}
		}
		return fsName == ""
	})
	if fsName == "" {
		return nil, nil, fmt.Errorf("%w: %s has no flag.NewFlagSet", errFlagSource, file)
	}
	// The variables of type httpserver.SecureOptions, whose AddFlags
	// declares the secure metrics flags (any other AddFlags is klog's).
	secureVars := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && selectorIs(vs.Type, "httpserver", "SecureOptions") {
			for _, id := range vs.Names {
				secureVars[id.Name] = true
			}
		}
		return true
	})
	var errs []error
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if sel.Sel.Name == "AddFlags" && len(call.Args) == 1 && isIdent(call.Args[0], fsName) {
			switch {
			case secureVars[identName(sel.X)]:
				new(httpserver.SecureOptions).AddFlags(fs)
			default:
				textlogger.NewConfig().AddFlags(fs)
			}
			return true
		}
		if !isIdent(sel.X, fsName) {
			return true
		}
		method, isVar := strings.CutSuffix(sel.Sel.Name, "Var")
		nameArg := 0
		if isVar {
			nameArg = 1
		}
		if len(call.Args) <= nameArg {
			return true
		}
		lit, ok := call.Args[nameArg].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			if slices.Contains([]string{"String", "Bool", "Int", "Int64", "Uint", "Uint64", "Float64", "Duration", "Func", "BoolFunc", ""}, method) {
				errs = append(errs, fmt.Errorf("%w: %s: a flag whose name is not a string literal", errFlagSource, fset.Position(call.Pos())))
			}
			return true
		}
		name, err := strconv.Unquote(lit.Value)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %w", errFlagSource, fset.Position(lit.Pos()), err))
			return true
		}
		switch method {
		case "String":
			fs.String(name, "", "")
		case "Bool":
			fs.Bool(name, false, "")
		case "Int":
			fs.Int(name, 0, "")
		case "Int64":
			fs.Int64(name, 0, "")
		case "Uint":
			fs.Uint(name, 0, "")
		case "Uint64":
			fs.Uint64(name, 0, "")
		case "Float64":
			fs.Float64(name, 0, "")
		case "Duration":
			fs.Duration(name, 0, "")
		default:
			errs = append(errs, fmt.Errorf("%w: %s: %s.%s(%q): a kind of flag this test does not know; add it to csiFlagSet",
				errFlagSource, fset.Position(call.Pos()), fsName, sel.Sel.Name, name))
			return true
		}
		own = append(own, name)
		return true
	})
	if len(own) == 0 {
		errs = append(errs, fmt.Errorf("%w: %s defines no flags on %s", errFlagSource, file, fsName))
	}
	return fs, own, errors.Join(errs...)
}

func selectorIs(e ast.Expr, x, sel string) bool {
	s, ok := e.(*ast.SelectorExpr)
	return ok && isIdent(s.X, x) && s.Sel.Name == sel
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// checkCSI loads deploy/csi's documents and applies nodevol-csi's policy:
// every error.
func checkCSI(docs []doc) []error {
	objs, errs := newAPIServer().load(docs)
	if len(errs) > 0 {
		return errs
	}
	return csiPolicyErrors(objs)
}

// csiPolicyErrors checks what nodevol-csi's deployment promises beyond
// what the API server checks: the CSIDriver the driver serves, the least
// privilege that works (privileged for Bidirectional propagation on the
// kubelet root, the three hostPaths and nothing else), nodevol-csi's own
// flags consistent with the mounts, probes on its endpoints, every node.
func csiPolicyErrors(objs *objects) []error {
	if len(objs.csiDrivers) != 1 || len(objs.namespaces) != 1 || len(objs.serviceAccounts) != 1 || len(objs.daemonSets) != 1 || len(objs.services) != 0 || len(objs.serviceMonitors) != 0 {
		return []error{fmt.Errorf("deploy/csi holds %d CSIDrivers, %d Namespaces, %d ServiceAccounts, %d DaemonSets, %d Services, %d ServiceMonitors; want one CSIDriver, Namespace, ServiceAccount and DaemonSet",
			len(objs.csiDrivers), len(objs.namespaces), len(objs.serviceAccounts), len(objs.daemonSets), len(objs.services), len(objs.serviceMonitors))}
	}
	var errs []error
	var driver *storagev1.CSIDriver
	for drv, d := range objs.csiDrivers {
		driver = drv
		errs = append(errs, csiDriverPolicy(drv, d)...)
	}
	var ns *corev1.Namespace
	for n := range objs.namespaces {
		ns = n
	}
	secure := csiSecureMetrics(objs)
	for sa, d := range objs.serviceAccounts {
		if sa.Namespace != ns.Name {
			errs = append(errs, fmt.Errorf("%v: ServiceAccount %s: namespace %q; want %q", d, sa.Name, sa.Namespace, ns.Name))
		}
		switch automount := sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken; {
		case automount && !secure:
			errs = append(errs, fmt.Errorf("%v: ServiceAccount %s: automountServiceAccountToken is not false: without --secure-metrics-address the driver never talks to the API server", d, sa.Name))
		case !automount && secure:
			errs = append(errs, fmt.Errorf("%v: ServiceAccount %s: automountServiceAccountToken false: with --secure-metrics-address the driver asks the API server about its scrapers, with its token", d, sa.Name))
		}
	}
	for ds, d := range objs.daemonSets {
		errs = append(errs, csiDaemonSetPolicy(ds, d, ns.Name, driver, objs)...)
		errs = append(errs, podSecurityErrors(ds, d, ns, csiRestrictedExceptions)...)
	}
	return errs
}

// csiSecureMetrics reports whether the driver's DaemonSet serves /metrics
// securely (a non-empty --secure-metrics-address).
func csiSecureMetrics(objs *objects) bool {
	for ds := range objs.daemonSets {
		for _, c := range ds.Spec.Template.Spec.Containers {
			if argValues(c.Args)["secure-metrics-address"] != "" {
				return true
			}
		}
	}
	return false
}

// csiDriverPolicy: the CSIDriver says what the driver serves (csi/driver):
// inline ephemeral volumes, nothing to attach, the pod's information on
// publish (the ephemeral flag it requires), fsGroup applied as to an
// emptyDir, no republishing, no capacity tracking.
func csiDriverPolicy(drv *storagev1.CSIDriver, d doc) []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%v: CSIDriver %s: %s", d, drv.Name, fmt.Sprintf(format, a...)))
	}
	s := drv.Spec
	if s.AttachRequired == nil || *s.AttachRequired {
		bad("attachRequired %s; want false: the driver has no controller service to attach with", ptrString(s.AttachRequired))
	}
	if s.PodInfoOnMount == nil || !*s.PodInfoOnMount {
		bad("podInfoOnMount %s; want true: the driver takes only volumes the kubelet marks csi.storage.k8s.io/ephemeral", ptrString(s.PodInfoOnMount))
	}
	if !slices.Equal(s.VolumeLifecycleModes, []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral}) {
		bad("volumeLifecycleModes %v; want [Ephemeral] only: the driver refuses persistent volumes", s.VolumeLifecycleModes)
	}
	if s.FSGroupPolicy == nil || *s.FSGroupPolicy != storagev1.FileFSGroupPolicy {
		bad("fsGroupPolicy %s; want File: the kubelet applies fsGroup as to an emptyDir", ptrString(s.FSGroupPolicy))
	}
	if s.RequiresRepublish == nil || *s.RequiresRepublish {
		bad("requiresRepublish %s; want false", ptrString(s.RequiresRepublish))
	}
	if s.StorageCapacity == nil || *s.StorageCapacity {
		bad("storageCapacity %s; want false: the driver reports no capacity", ptrString(s.StorageCapacity))
	}
	if len(s.TokenRequests) > 0 {
		bad("tokenRequests %v; want none: the driver uses no token", s.TokenRequests)
	}
	return errs
}

func csiDaemonSetPolicy(ds *appsv1.DaemonSet, d doc, ns string, driver *storagev1.CSIDriver, objs *objects) []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%v: DaemonSet %s: %s", d, ds.Name, fmt.Sprintf(format, a...)))
	}
	secure := csiSecureMetrics(objs)
	c := daemonSetBasics(ds, ns, objs, "pods using the volume on tainted nodes and control planes could not start", secure, bad)
	spec := &ds.Spec.Template.Spec
	if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < csiShutdownGrace+5*time.Second {
		bad("terminationGracePeriodSeconds %s; want at least %v: the driver lets calls in flight finish for up to %v, then removes its sockets",
			ptrString(g), (csiShutdownGrace + 5*time.Second).Seconds(), csiShutdownGrace)
	}
	if c == nil {
		return errs
	}

	// Privilege: privileged (the API server's condition for Bidirectional
	// propagation), uid 0, nothing else writable.
	sc := c.SecurityContext
	if sc.Privileged == nil || !*sc.Privileged {
		bad("privileged %s; want true: Bidirectional propagation of the kubelet root needs it", ptrString(sc.Privileged))
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		bad("readOnlyRootFilesystem %s; want true: the driver writes only to its hostPaths", ptrString(sc.ReadOnlyRootFilesystem))
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		bad("runAsUser %s; want 0 (the kubelet root and pod directories are root's, mode 0750)", ptrString(sc.RunAsUser))
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil && spec.SecurityContext != nil {
		seccomp = spec.SecurityContext.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		bad("seccompProfile %+v; want RuntimeDefault", seccomp)
	}
	for _, e := range imageErrors(c, "nodevol-csi") {
		bad("%s", e)
	}

	// nodevol-csi's flags, parsed by its own flag set.
	fs, own, err := csiFlagSet(csiMain)
	if err != nil {
		bad("%v", err)
		return errs
	}
	if err := fs.Parse(c.Args); err != nil {
		bad("args: %v (nodevol-csi's flags are in %s)", err, filepath.ToSlash(csiMain))
		return errs
	}
	if fs.NArg() > 0 {
		bad("args: %q after the flags; nodevol-csi takes none", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range own {
		if !set[name] && name != "version" {
			bad("args do not set --%s: every flag is explicit, so that a new image's changed default changes nothing unseen", name)
		}
	}
	if set["version"] {
		bad("args set --version: nodevol-csi would print its version and exit")
	}
	flagValue := func(name string) string { return fs.Lookup(name).Value.String() }

	// The driver's name and node.
	if driver != nil && flagValue("driver-name") != driver.Name {
		bad("--driver-name=%s; want the CSIDriver's name %s", flagValue("driver-name"), driver.Name)
	}
	if flagValue("node-id") != "$(NODE_NAME)" || !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}) {
		bad("--node-id=%s; want $(NODE_NAME), with env NODE_NAME from the field spec.nodeName (the kubelet's node name)", flagValue("node-id"))
	}

	// The three hostPaths, and nothing else.
	root := flagValue("kubelet-root")
	pluginDir := path.Join(root, "plugins", flagValue("driver-name"))
	want := []struct {
		what, hostPath string
		typ            corev1.HostPathType
		mountPath      string
		propagation    corev1.MountPropagationMode
	}{
		{"the kubelet root (--kubelet-root, at the same path as on the host)", root, corev1.HostPathDirectory, root, corev1.MountPropagationBidirectional},
		{"the plugin directory (--endpoint's directory and --state-dir)", pluginDir, corev1.HostPathDirectoryOrCreate, path.Dir(flagValue("endpoint")), corev1.MountPropagationNone},
		{"the plugin registry (--registration-dir)", path.Join(root, "plugins_registry"), corev1.HostPathDirectory, flagValue("registration-dir"), corev1.MountPropagationNone},
	}
	if len(spec.Volumes) != len(want) || len(c.VolumeMounts) != len(want) {
		bad("%d volumes, %d volume mounts; want exactly the kubelet root, the plugin directory and the plugin registry", len(spec.Volumes), len(c.VolumeMounts))
	}
	for _, w := range want {
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.HostPath != nil && v.HostPath.Path == w.hostPath })
		if i < 0 || spec.Volumes[i].HostPath.Type == nil || *spec.Volumes[i].HostPath.Type != w.typ {
			bad("no hostPath volume %s of type %s for %s", w.hostPath, w.typ, w.what)
			continue
		}
		var mounts []corev1.VolumeMount
		for _, m := range c.VolumeMounts {
			if m.Name == spec.Volumes[i].Name {
				mounts = append(mounts, m)
			}
		}
		if len(mounts) != 1 {
			bad("hostPath %s is mounted %d times; want once", w.hostPath, len(mounts))
			continue
		}
		m := mounts[0]
		propagation := corev1.MountPropagationNone
		if m.MountPropagation != nil {
			propagation = *m.MountPropagation
		}
		if m.MountPath != w.mountPath || m.ReadOnly || propagation != w.propagation || m.SubPath != "" || m.SubPathExpr != "" {
			bad("hostPath %s mounted at %s, readOnly %v, propagation %s; want it at %s, writable, propagation %s: %s",
				w.hostPath, m.MountPath, m.ReadOnly, propagation, w.mountPath, w.propagation, w.what)
		}
	}
	if flagValue("state-dir") != path.Dir(flagValue("endpoint")) {
		bad("--state-dir=%s; want the plugin directory %s: the quota bookkeeping must outlive the container", flagValue("state-dir"), path.Dir(flagValue("endpoint")))
	}
	if ke := path.Join(pluginDir, path.Base(flagValue("endpoint"))); flagValue("kubelet-endpoint") != ke {
		bad("--kubelet-endpoint=%s; want %s, the --endpoint socket as the kubelet sees it", flagValue("kubelet-endpoint"), ke)
	}

	// The HTTP endpoints.
	_, port, err := net.SplitHostPort(flagValue("http-address"))
	if err != nil {
		bad("--http-address=%s: %v", flagValue("http-address"), err)
	}
	// One port named http on --http-address's port, and with secure
	// metrics one named secure-metrics on theirs; no hostPort.
	wantPorts := []string{"http:" + port}
	wantText := fmt.Sprintf("one named http on --http-address's port %s", port)
	if secure {
		_, sport, err := net.SplitHostPort(flagValue("secure-metrics-address"))
		if err != nil {
			bad("--secure-metrics-address=%s: %v", flagValue("secure-metrics-address"), err)
		}
		wantPorts = append(wantPorts, "secure-metrics:"+sport)
		wantText += fmt.Sprintf(" and one named secure-metrics on --secure-metrics-address's port %s", sport)
	}
	var gotPorts []string
	for _, p := range c.Ports {
		if p.HostPort != 0 {
			gotPorts = append(gotPorts, "hostPort")
		}
		gotPorts = append(gotPorts, fmt.Sprintf("%s:%d", p.Name, p.ContainerPort))
	}
	if !slices.Equal(gotPorts, wantPorts) {
		bad("ports %+v; want %s, no hostPort", c.Ports, wantText)
	}
	probesAndResources(c, "http", port, bad)
	return errs
}

// TestCSIManifests: deploy/csi as it is passes the API server's
// validation and nodevol-csi's policy.
func TestCSIManifests(t *testing.T) {
	docs, err := readManifests(filepath.Join(deployDir, csiDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 4 {
		t.Fatalf("read %d documents under deploy/csi; want the CSIDriver, Namespace, ServiceAccount and DaemonSet", len(docs))
	}
	for _, err := range checkCSI(docs) {
		t.Error(err)
	}
}

// TestCSIFlagSet: the flags read from nodevol-csi's source are its own
// and klog's, with their types.
func TestCSIFlagSet(t *testing.T) {
	fs, own, err := csiFlagSet(csiMain)
	if err != nil {
		t.Fatalf("csiFlagSet() = %v", err)
	}
	for _, name := range []string{"driver-name", "endpoint", "kubelet-endpoint", "registration-dir", "kubelet-root", "node-id", "http-address", "quotas", "state-dir", "memory-bytes", "version"} {
		if !slices.Contains(own, name) {
			t.Errorf("flags %v; want %s", own, name)
		}
	}
	if fs.Lookup("v") == nil {
		t.Errorf("no klog flag -v: the textlogger's AddFlags was not seen")
	}
	for _, args := range [][]string{{"--quotas=maybe"}, {"--memory-bytes=1Gi"}, {"--kubelet-rot=/x"}, {"--v=x"}} {
		if err := fs.Parse(args); err == nil {
			t.Errorf("Parse(%q) = nil; want an error", args)
		}
	}
}

// TestCSIManifestsMutated: each mistake, made in a copy of deploy/csi's
// text, is caught, with an error that names it.
func TestCSIManifestsMutated(t *testing.T) {
	docs, err := readManifests(filepath.Join(deployDir, csiDir))
	if err != nil {
		t.Fatal(err)
	}
	runMutations(t, "deploy/csi/", docs, checkCSI, []mutation{
		// The API server's decoding and validation.
		{"typo in a CSIDriver field", "podInfoOnMount: true", "podInfoOnMuont: true", `unknown field "spec.podInfoOnMuont"`},
		{"typo in a DaemonSet field", "              mountPropagation: Bidirectional\n", "              mountPropogation: Bidirectional\n", `unknown field "spec.template.spec.containers[0].volumeMounts[0].mountPropogation"`},
		{"duplicated field", "      enableServiceLinks: false\n", "      enableServiceLinks: false\n      enableServiceLinks: true\n", `key "enableServiceLinks" already set`},
		{"an fsGroupPolicy the API does not have", "fsGroupPolicy: File", "fsGroupPolicy: Files", "spec.fsGroupPolicy: Unsupported value"},
		{"a driver name that is not a DNS subdomain", "kind: CSIDriver\nmetadata:\n  name: emptydir.nodevol.github.io\n", "kind: CSIDriver\nmetadata:\n  name: emptydir_nodevol\n", "metadata.name: Invalid value"},
		{"bidirectional propagation without privilege", "            privileged: true\n", "            privileged: false\n", "Bidirectional mount propagation is available only to privileged containers"},

		// The CSIDriver's policy.
		{"attach required", "attachRequired: false", "attachRequired: true", "attachRequired true; want false"},
		{"attachRequired left to its default (true)", "  attachRequired: false\n", "", "attachRequired true; want false"},
		{"no pod info", "podInfoOnMount: true", "podInfoOnMount: false", "podInfoOnMount false; want true"},
		{"persistent volumes", "    - Ephemeral\n", "    - Ephemeral\n    - Persistent\n", "want [Ephemeral] only"},
		{"fsGroup not applied", "fsGroupPolicy: File", "fsGroupPolicy: None", "fsGroupPolicy None; want File"},
		{"fsGroupPolicy left to its default", "  fsGroupPolicy: File\n", "", "fsGroupPolicy ReadWriteOnceWithFSType; want File"},
		{"republish", "requiresRepublish: false", "requiresRepublish: true", "requiresRepublish true; want false"},
		{"capacity tracking", "storageCapacity: false", "storageCapacity: true", "storageCapacity true; want false"},
		{"CSIDriver named otherwise", "kind: CSIDriver\nmetadata:\n  name: emptydir.nodevol.github.io\n", "kind: CSIDriver\nmetadata:\n  name: emptydir.example.com\n", "want the CSIDriver's name emptydir.example.com"},

		// Privilege.
		{"writable root filesystem", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem false; want true"},
		{"propagation HostToContainer", "              mountPropagation: Bidirectional\n", "              mountPropagation: HostToContainer\n", "propagation HostToContainer; want it at /var/lib/kubelet, writable, propagation Bidirectional"},
		{"bidirectional on the plugin directory", "              mountPath: /csi\n", "              mountPath: /csi\n              mountPropagation: Bidirectional\n", "mounted at /csi, readOnly false, propagation Bidirectional; want it at /csi, writable, propagation None"},
		{"a read-only registry", "              mountPath: /registration\n", "              mountPath: /registration\n              readOnly: true\n", "mounted at /registration, readOnly true"},
		{"a fourth hostPath", "      volumes:\n", "      volumes:\n        - name: host\n          hostPath:\n            path: /\n", "want exactly the kubelet root, the plugin directory and the plugin registry"},
		{"the plugin directory elsewhere", "path: /var/lib/kubelet/plugins/emptydir.nodevol.github.io\n", "path: /var/lib/kubelet/plugins/nodevol\n", "no hostPath volume /var/lib/kubelet/plugins/emptydir.nodevol.github.io of type DirectoryOrCreate"},
		{"the kubelet root maybe created", "            path: /var/lib/kubelet\n            type: Directory\n", "            path: /var/lib/kubelet\n            type: DirectoryOrCreate\n", "no hostPath volume /var/lib/kubelet of type Directory"},
		{"hostNetwork", "      enableServiceLinks: false\n", "      enableServiceLinks: false\n      hostNetwork: true\n", "hostNetwork true"},
		{"a host port", "              containerPort: 9479\n", "              containerPort: 9479\n              hostPort: 9479\n", "no hostPort"},
		{"a namespace enforcing baseline", "pod-security.kubernetes.io/enforce: privileged", "pod-security.kubernetes.io/enforce: baseline", `enforces Pod Security "baseline", which refuses the pods`},
		{"AppArmor unconfined", "            privileged: true\n", "            privileged: true\n            appArmorProfile:\n              type: Unconfined\n", "forbids forbidden AppArmor profile"},
		{"a service account token", "\nautomountServiceAccountToken: false", "\nautomountServiceAccountToken: true", "ServiceAccount nodevol-csi: automountServiceAccountToken is not false"},

		// nodevol-csi's flags.
		{"a misspelt flag", "- --state-dir=/csi", "- --statedir=/csi", "flag provided but not defined: -statedir"},
		{"a bad flag value", "- --quotas=true", "- --quotas=yes", `invalid boolean value "yes" for -quotas`},
		{"a flag left to its default", "            - --memory-bytes=-1\n", "", "args do not set --memory-bytes"},
		{"an argument", "            - --memory-bytes=-1\n", "            - --memory-bytes=-1\n            - serve\n", `args: ["serve"] after the flags`},
		{"--version", "            - --memory-bytes=-1\n", "            - --memory-bytes=-1\n            - --version\n", "args set --version"},
		{"the kubelet endpoint elsewhere", "- --kubelet-endpoint=/var/lib/kubelet/plugins/emptydir.nodevol.github.io/csi.sock", "- --kubelet-endpoint=/var/lib/kubelet/plugins/nodevol/csi.sock", "the --endpoint socket as the kubelet sees it"},
		{"the endpoint outside the plugin directory", "- --endpoint=/csi/csi.sock", "- --endpoint=/run/csi.sock", "want it at /run, writable"},
		{"the state outside the plugin directory", "- --state-dir=/csi", "- --state-dir=/var/lib/nodevol-csi", "the quota bookkeeping must outlive the container"},
		{"the registry elsewhere", "- --registration-dir=/registration", "- --registration-dir=/plugins_registry", "the plugin registry (--registration-dir)"},
		{"the node id from the pod name", "fieldPath: spec.nodeName", "fieldPath: metadata.name", "env NODE_NAME from the field spec.nodeName"},
		{"a driver name the CSIDriver does not have", "- --driver-name=emptydir.nodevol.github.io", "- --driver-name=nodevol", "--driver-name=nodevol; want the CSIDriver's name"},

		// The rest.
		{"exporter's image", "image: ghcr.io/nodevol/nodevol-csi:v0.0.0-dev", "image: ghcr.io/nodevol/nodevol:v0.0.0-dev", "want an image of repository .../nodevol-csi"},
		{"image tag latest", "image: ghcr.io/nodevol/nodevol-csi:v0.0.0-dev", "image: ghcr.io/nodevol/nodevol-csi:latest", "not latest or none"},
		{"a command replacing the entrypoint", "          args:\n", "          command: [/bin/sh]\n          args:\n", "want the image's entrypoint"},
		{"http port elsewhere", "- --http-address=:9479", "- --http-address=:9480", "want one named http on --http-address's port 9480"},
		{"secure metrics without the token", "            - --secure-metrics-address=\n", "            - --secure-metrics-address=:9480\n", "automountServiceAccountToken false; want true"},
		{"secure metrics without their port", "            - --secure-metrics-address=\n", "            - --secure-metrics-address=:9480\n", "one named secure-metrics on --secure-metrics-address's port 9480"},
		{"probe on the wrong path", "path: /readyz", "path: /ready", "readiness probe"},
		{"a CPU limit", "            limits:\n              memory: 128Mi", "            limits:\n              cpu: 100m\n              memory: 128Mi", "no CPU limit"},
		{"no toleration", "      tolerations:\n        - operator: Exists\n", "", "no toleration"},
		{"a short grace period", "terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: 10", "terminationGracePeriodSeconds 10; want at least 15"},
		{"no rolling update", "    type: RollingUpdate\n    rollingUpdate:\n      maxUnavailable: 10%\n", "    type: OnDelete\n", "want RollingUpdate with maxUnavailable"},
	})
}
