package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/mountdetect"
)

var versionKeys = []string{"module", "version", "revision", "time", "modified", "goVersion", "os", "arch", "kernel", "kernelFeatures"}

// What the build recorded is reported; what it did not is "unknown" (null
// in JSON), never a guess.
func TestNewVersionInfo(t *testing.T) {
	stamped := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/nodevol/nodevol", Version: "v0.3.1-0.20261123104557-40a569332a41+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "-buildmode", Value: "exe"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "40a569332a41d98991a6634778f8dbb74c97c238"},
			{Key: "vcs.time", Value: "2026-11-23T10:45:57Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	devel := &debug.BuildInfo{Main: debug.Module{Path: "github.com/nodevol/nodevol", Version: "(devel)"}}
	for _, tc := range []struct {
		name  string
		bi    *debug.BuildInfo
		ok    bool
		lines []string
		json  string
	}{
		{"stamped", stamped, true, []string{
			"nodevol v0.3.1-0.20261123104557-40a569332a41+dirty\n",
			"  module:   github.com/nodevol/nodevol\n",
			"  revision: 40a569332a41d98991a6634778f8dbb74c97c238\n",
			"  time:     2026-11-23T10:45:57Z\n",
			"  modified: yes\n",
		}, `"module":"github.com/nodevol/nodevol","version":"v0.3.1-0.20261123104557-40a569332a41+dirty","revision":"40a569332a41d98991a6634778f8dbb74c97c238","time":"2026-11-23T10:45:57Z","modified":true,`},
		{"go run or -buildvcs=false", devel, true, []string{
			"nodevol (devel)\n",
			"  revision: unknown (the build recorded no VCS state: go run, -buildvcs=false or no checkout)\n",
			"  time:     unknown\n",
			"  modified: unknown\n",
		}, `"module":"github.com/nodevol/nodevol","version":"(devel)","revision":null,"time":null,"modified":null,`},
		{"no build information", nil, false, []string{
			"nodevol unknown\n",
			"  module:   unknown\n",
		}, `"module":"unknown","version":"unknown","revision":null,"time":null,"modified":null,`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVersionInfo(tc.bi, tc.ok)
			var b strings.Builder
			writeVersionHuman(&b, &v)
			wantContains(t, "version", b.String(), tc.lines...)
			wantContains(t, "version", b.String(),
				"  go:       "+runtime.Version()+"\n",
				"  platform: "+runtime.GOOS+"/"+runtime.GOARCH+"\n")
			j, err := json.Marshal(&v)
			if err != nil {
				t.Fatal(err)
			}
			wantContains(t, "version --json", string(j), tc.json)
		})
	}
}

// The features reported are the ones the packages that use them probed.
func TestRunVersion(t *testing.T) {
	r := nodevol(t, "version")
	r.wantCode(t, ExitOK)
	if r.stderr != "" {
		t.Errorf("stderr = %q, want nothing", r.stderr)
	}
	rel := kernelRelease()
	if rel == "" {
		rel = "unknown"
	}
	wantContains(t, "stdout", r.stdout, "  kernel:   "+rel+"\n", "kernel features nodevol uses, probed on this machine:\n")

	r = nodevol(t, "version", "--json")
	r.wantCode(t, ExitOK)
	objs := jsonLines(t, r.stdout, versionKeys...)
	if len(objs) != 1 {
		t.Fatalf("got %d JSON lines, want 1", len(objs))
	}
	var v struct {
		KernelFeatures []struct{ Name, About, Available, Detail string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatal(err)
	}
	yesNo := func(b bool) string { return map[bool]string{true: "yes", false: "no"}[b] }
	k := mountdetect.Kernel()
	mountAPI, mountAPIErr := emptydir.MountAPI()
	noswap, noswapErr := emptydir.TmpfsNoswap()
	probed := func(ok bool, err error) string {
		if err != nil {
			return "unknown"
		}
		return yesNo(ok)
	}
	want := []struct{ name, available string }{
		{"statx-mnt-id-unique", yesNo(k.StatxMountIDUnique)},
		{"statx-mnt-id", yesNo(k.StatxMountID)},
		{"openat2", yesNo(k.Openat2)},
		{"mount-api", probed(mountAPI, mountAPIErr)},
		{"tmpfs-noswap", probed(noswap, noswapErr)},
		{"quotactl-fd", yesNo(fsquota.QuotactlFD())},
		{"mnt-ns-init-ino", yesNo(mountdetect.InitialMountNamespaceInode())},
	}
	if len(v.KernelFeatures) != len(want) {
		t.Fatalf("kernelFeatures = %+v; want %d features", v.KernelFeatures, len(want))
	}
	for i, w := range want {
		f := v.KernelFeatures[i]
		if f.Name != w.name || f.Available != w.available || f.About == "" || (f.Available == "unknown") != (f.Detail != "") {
			t.Errorf("kernelFeatures[%d] = %+v; want %s %s, with a detail exactly when unknown", i, f, w.name, w.available)
		}
		if !strings.Contains(r.stdout, `"available":"`+w.available+`"`) {
			t.Errorf("available is not a string in %s", r.stdout)
		}
	}
}

// TestVersionListsTheREADMEKernelFeatures: every row of the README's table
// of kernel features (the Linux release in its first column) is a feature
// nodevol version reports, so that an operator can check a node against
// the table.
func TestVersionListsTheREADMEKernelFeatures(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\s*\|\s*(\d+\.\d+)\s*\|([^|]*)\|`)
	rows := row.FindAllStringSubmatch(string(readme), -1)
	if len(rows) < 7 {
		t.Fatalf("found %d rows of kernel features in README.md; want the table (7 rows)", len(rows))
	}
	v := newVersionInfo(nil, false)
	for _, r := range rows {
		release, feature := r[1], strings.TrimSpace(r[2])
		found := false
		for _, f := range v.KernelFeatures {
			if strings.Contains(f.About, "Linux "+release+")") || strings.Contains(f.About, "Linux "+release+";") {
				found = true
			}
		}
		if !found {
			t.Errorf("README.md lists %s (Linux %s); nodevol version reports no feature of Linux %s: %+v", feature, release, release, v.KernelFeatures)
		}
	}
}

// TestReleaseVersion: the version a release stamps with -ldflags -X takes
// the place of the build info's, with build info or without; the VCS
// state still comes from the build info.
func TestReleaseVersion(t *testing.T) {
	defer func(v string) { releaseVersion = v }(releaseVersion)
	releaseVersion = "v1.2.3"
	bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/nodevol/nodevol", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}}
	v := newVersionInfo(bi, true)
	if v.Version != "v1.2.3" || v.Revision == nil || *v.Revision != "abc" {
		t.Errorf("with build info: version %q, revision %v; want v1.2.3, abc", v.Version, v.Revision)
	}
	if v := newVersionInfo(nil, false); v.Version != "v1.2.3" {
		t.Errorf("without build info: version %q; want v1.2.3", v.Version)
	}
}
