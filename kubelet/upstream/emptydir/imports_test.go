package emptydir

// The upstream test file's imports that nothing else in this module needs,
// so that go mod tidy (which does not see files added by -overlay) keeps
// them in go.mod and go.sum.
import (
	_ "github.com/stretchr/testify/assert"
	_ "github.com/stretchr/testify/require"
	_ "k8s.io/apiserver/pkg/util/feature"
	_ "k8s.io/client-go/util/testing"
	_ "k8s.io/component-base/featuregate/testing"
	_ "k8s.io/kubernetes/pkg/features"
	_ "k8s.io/kubernetes/pkg/kubelet/util/swap"
	_ "k8s.io/kubernetes/pkg/volume/testing"
	_ "k8s.io/kubernetes/pkg/volume/util"
	_ "k8s.io/utils/ptr"
)
