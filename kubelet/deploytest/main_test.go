package deploytest

import (
	"testing"

	"k8s.io/kubernetes/pkg/capabilities"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// The privilege test mounts: every test of the package runs in a private
// mount namespace when it can (as root), so a failed test leaks no mount.
//
// The API server's validation refuses a privileged container unless it
// runs with --allow-privileged=true, which is kube-apiserver's flag
// default false but what kubeadm and managed clusters set: a CSI node
// plugin (deploy/csi/) cannot work without it. The exporter's policy
// still requires privileged: false of its own pod.
func TestMain(m *testing.M) {
	capabilities.Setup(true, 0)
	mounttest.Main(m)
}
