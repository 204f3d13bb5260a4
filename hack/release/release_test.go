package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// TestSBOM writes the SBOM of this test binary (a Go program with build
// info, as a release's binaries are) twice: the same bytes, an SPDX 2.3
// document whose IDs are unique and whose relationships name packages it
// has, listing the main module, the standard library and every module the
// binary links.
func TestSBOM(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog-linux-amd64")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prog-image.oci.tar"), []byte("image"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A second program in the image, as nodevol-agent is in nodevol's.
	agent := filepath.Join(dir, "prog-agent-linux-amd64")
	if err := os.WriteFile(agent, b, 0o755); err != nil {
		t.Fatal(err)
	}
	programs := []sbomProgram{{name: "prog", bins: []string{bin}}, {name: "prog-agent", bins: []string{agent}}}
	created := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	a, err := sbom("prog", "v1.2.3", created, programs, "prog-image.oci.tar", "sha256:abc", dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := sbom("prog", "v1.2.3", created, programs, "prog-image.oci.tar", "sha256:abc", dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(again) {
		t.Error("two SBOMs of the same binary differ")
	}
	var doc spdxDocument
	if err := json.Unmarshal(a, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" ||
		doc.CreationInfo.Created != "2026-11-27T12:00:00Z" || len(doc.DocumentDescribes) != 1 {
		t.Errorf("document header %+v", doc)
	}
	ids := map[string]spdxPackage{"SPDXRef-DOCUMENT": {}}
	names := map[string]int{}
	for _, p := range doc.Packages {
		if _, dup := ids[p.SPDXID]; dup || !strings.HasPrefix(p.SPDXID, "SPDXRef-") || strings.Trim(p.SPDXID[8:], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") != "" {
			t.Errorf("package %s: SPDXID %q is not unique or not valid", p.Name, p.SPDXID)
		}
		if p.DownloadLocation == "" || p.LicenseConcluded == "" || p.CopyrightText == "" {
			t.Errorf("package %s lacks a required field: %+v", p.Name, p)
		}
		ids[p.SPDXID] = p
		names[p.Name]++
	}
	for _, r := range doc.Relationships {
		if _, ok := ids[r.Element]; !ok {
			t.Errorf("relationship from %s: no such element", r.Element)
		}
		if _, ok := ids[r.Related]; !ok {
			t.Errorf("relationship to %s: no such element", r.Related)
		}
	}
	if img := ids[doc.DocumentDescribes[0]]; img.Name != registry+"prog" || len(img.Checksums) != 1 ||
		img.Checksums[0].Value != "6105d6cc76af400325e94d588ce511be5bfdbb73b437dc51eca43917d7a43e3d" { // sha256("image")
		t.Errorf("the document describes %+v; want the image with its SHA-256", img)
	} else if len(img.ExternalRefs) != 1 || img.ExternalRefs[0].Locator != "pkg:oci/prog@sha256%3Aabc?repository_url=ghcr.io/nodevol/prog&tag=v1.2.3" {
		t.Errorf("the image's package URL: %+v", img.ExternalRefs)
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info")
	}
	want := []string{info.Main.Path, "stdlib"}
	for _, d := range info.Deps {
		want = append(want, moduleID(d)[:strings.LastIndex(moduleID(d), "@")])
	}
	for i, n := range want {
		// The main module once per program (each its binary), every other
		// module once, whichever programs link it.
		count := 1
		if i == 0 {
			count = 2
		}
		if names[n] != count {
			t.Errorf("the SBOM has %d packages %s; want %d", names[n], n, count)
		}
	}
	contained := map[string]bool{}
	for _, r := range doc.Relationships {
		if r.Element == doc.DocumentDescribes[0] && r.Type == "CONTAINS" {
			contained[ids[r.Related].Comment] = true
		}
	}
	for _, prog := range []string{"prog", "prog-agent"} {
		if !contained["the binary "+prog+" ("+info.Path+", for linux/amd64)"] {
			t.Errorf("the image does not contain the program %s: %v", prog, contained)
		}
	}
}

// TestSums: SHA256SUMS lists every other file, and sha256sum -c agrees.
func TestSums(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"b": "bee\n", "a": "", "c.spdx.json": "{}\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeSums(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], "  a") || !strings.HasSuffix(lines[2], "  c.spdx.json") {
		t.Errorf("SHA256SUMS:\n%s", b)
	}
	if _, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command("sha256sum", "-c", "SHA256SUMS")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c: %v\n%s", err, out)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{}, {"-version", "v1.2.3"}, {"-o", "x"}, {"-version", "v1.2.3", "-o", "x", "-kubelet-arch", "riscv64"},
		{"-version", "v1.2.3", "-o", "x", "-kubelet-arch", "amd64,amd64"}} {
		var stdout, stderr strings.Builder
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("run(%q) = %d; want 2 (usage)", args, code)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "old"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := emptyDir(dir); err == nil {
		t.Error("emptyDir of a directory with a file: nil error")
	}
}
