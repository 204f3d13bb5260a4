package volumeplugin

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	k8svolume "k8s.io/kubernetes/pkg/volume"
	upstreamemptydir "k8s.io/kubernetes/pkg/volume/emptydir"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"
	"k8s.io/mount-utils"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
)

// realMounterHost is the fake kubelet host with the real mounter, so that
// upstream's plugin sees the mounts as it does on a node.
type realMounterHost struct{ volumetest.FakeVolumeHost }

func (realMounterHost) GetMounter() mount.Interface { return mount.New("") }

// nested is something mounted inside a volume whose data is not the
// volume's: what the differential test mounts, and how it reads it back.
type nested struct {
	name  string
	mount func(t *testing.T, vol, outside string) (check string)
}

var nestedMounts = []nested{
	{"tmpfs (a NAS)", func(t *testing.T, vol, outside string) string {
		dir := filepath.Join(vol, "nas")
		mounttest.Tmpfs(t, dir, "size=1m")
		mounttest.Sentinels(t, dir)
		return dir
	}},
	{"bind mount of a directory on the same filesystem", func(t *testing.T, vol, outside string) string {
		src := filepath.Join(outside, "shared")
		mounttest.Sentinels(t, src)
		mounttest.Bind(t, src, filepath.Join(vol, "shared"))
		return src
	}},
	{"bind-mounted file", func(t *testing.T, vol, outside string) string {
		src := filepath.Join(outside, "files")
		mounttest.Build(t, src, "file config.json {\"precious\": true}")
		dst := filepath.Join(vol, "config.json")
		mounttest.Build(t, vol, "file config.json placeholder")
		mounttest.Bind(t, filepath.Join(src, "config.json"), dst)
		return src
	}},
}

// TestDifferentialNestedMounts sets up a Default emptyDir with upstream's
// plugin and with nodevol's, mounts something that is not the volume's
// inside it, and tears it down: upstream's os.RemoveAll deletes what lies
// behind the mount; nodevol refuses and keeps every byte.
// docs/upstream-tests.md records the table this logs.
func TestDifferentialNestedMounts(t *testing.T) {
	mounttest.RequireMounts(t)
	type outcome struct{ err, lost string }
	results := map[string]map[string]outcome{}
	for _, impl := range []string{"upstream", "nodevol"} {
		results[impl] = map[string]outcome{}
		for _, n := range nestedMounts {
			t.Run(impl+"/"+n.name, func(t *testing.T) {
				root := t.TempDir()
				outside := t.TempDir()
				var plugins []k8svolume.VolumePlugin
				if impl == "upstream" {
					plugins = upstreamemptydir.ProbeVolumePlugins()
				} else {
					plugins = ProbeVolumePlugins()
				}
				var mgr k8svolume.VolumePluginMgr
				host := realMounterHost{volumetest.NewFakeVolumeHost(t, root, nil, nil)}
				if err := mgr.InitPlugins(plugins, nil, host); err != nil {
					t.Fatal(err)
				}
				p, err := mgr.FindPluginByName("kubernetes.io/empty-dir")
				if err != nil {
					t.Fatal(err)
				}
				m, err := p.NewMounter(emptyDirSpec("cache", v1.EmptyDirVolumeSource{}), testPod())
				if err != nil {
					t.Fatal(err)
				}
				if err := m.SetUp(k8svolume.MounterArgs{}); err != nil {
					t.Fatal(err)
				}
				check := n.mount(t, m.GetPath(), outside)
				before := mounttest.Snapshot(t, check)
				u, err := p.NewUnmounter("cache", types.UID(testUID))
				if err != nil {
					t.Fatal(err)
				}
				o := outcome{err: "none"}
				if err := u.TearDown(); errors.Is(err, mountdetect.ErrCrossesMount) {
					o.err = "refused, the mount listed (mountdetect.ErrCrossesMount)"
				} else if err != nil {
					o.err = summary(err.Error())
				}
				after := mounttest.Snapshot(t, check)
				var lost []string
				for name, desc := range before {
					if after[name] != desc {
						lost = append(lost, name)
					}
				}
				o.lost = fmt.Sprintf("%d of %d entries", len(lost), len(before))
				results[impl][n.name] = o
				t.Logf("%s, %s: TearDown error: %s; lost %s %v", impl, n.name, o.err, o.lost, lost)
				switch {
				case impl == "nodevol" && (len(lost) > 0 || o.err == "none"):
					t.Errorf("nodevol lost %v (TearDown error: %s); want a refusal and every byte kept", lost, o.err)
				case impl == "upstream" && n.name != "bind-mounted file" && len(lost) == 0:
					t.Errorf("upstream's plugin kept the data behind a %s; docs/upstream-tests.md says it loses it — update the table", n.name)
				}
			})
		}
	}
	var b strings.Builder
	b.WriteString("\n| nested mount | upstream emptyDir TearDown | nodevol TearDown |\n|---|---|---|\n")
	for _, n := range nestedMounts {
		u, nv := results["upstream"][n.name], results["nodevol"][n.name]
		fmt.Fprintf(&b, "| %s | error: %s; lost %s | error: %s; lost %s |\n", n.name, u.err, u.lost, nv.err, nv.lost)
	}
	t.Log(b.String())
}

// summary is the end of an error's first line, without the paths that
// differ from run to run.
func summary(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}
