package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/nodevol/nodevol/internal/tools/checkout"
)

// SPDX 2.3 JSON: the fields of a document, package and relationship this
// SBOM uses (https://spdx.github.io/spdx-spec/v2.3/).
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	DocumentDescribes []string           `json:"documentDescribes"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string            `json:"name"`
	SPDXID           string            `json:"SPDXID"`
	VersionInfo      string            `json:"versionInfo,omitempty"`
	Supplier         string            `json:"supplier,omitempty"`
	DownloadLocation string            `json:"downloadLocation"`
	FilesAnalyzed    bool              `json:"filesAnalyzed"`
	Checksums        []spdxChecksum    `json:"checksums,omitempty"`
	LicenseConcluded string            `json:"licenseConcluded"`
	LicenseDeclared  string            `json:"licenseDeclared"`
	CopyrightText    string            `json:"copyrightText"`
	PrimaryPurpose   string            `json:"primaryPackagePurpose,omitempty"`
	Comment          string            `json:"comment,omitempty"`
	ExternalRefs     []spdxExternalRef `json:"externalRefs,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxExternalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

const noAssertion = "NOASSERTION"

// moduleID is a module's path and version, after its replacement.
func moduleID(m *debug.Module) string {
	if m.Replace != nil {
		return moduleID(m.Replace)
	}
	return m.Path + "@" + m.Version
}

// sbomProgram is one program of an SBOM: its name and its binaries, one
// per architecture, named NAME-linux-ARCH.
type sbomProgram struct {
	name string
	bins []string
}

// sbom is the SPDX 2.3 JSON document of the Go modules in programs (each
// built for several architectures), read from their build info: per
// program the main module, every module it links (after replacements, as
// the build used them) and the Go standard library of the toolchain, each
// module listed once however many programs link it. subject, when not
// empty, is the image tarball in dir holding the binaries (the nodevol
// image holds nodevol and nodevol-agent): the document describes it, with
// its SHA-256 and a package URL naming the image by digest (its image
// index's), and it contains the programs. Created is the commit's time, so
// that the document is reproducible.
func sbom(name, version string, created time.Time, programs []sbomProgram, subject, digest, dir string) ([]byte, error) {
	doc := spdxDocument{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              name + "-" + version,
		DocumentNamespace: checkout.Source + "/releases/" + version + "/" + name + ".spdx.json",
		CreationInfo: spdxCreationInfo{
			Created:  created.UTC().Format(time.RFC3339),
			Creators: []string{"Organization: nodevol", "Tool: nodevol-hack-release-" + version},
		},
	}
	ids := map[string]bool{}
	add := func(p spdxPackage) string {
		p.SPDXID = "SPDXRef-" + spdxIDPart(p.Name+"-"+p.VersionInfo)
		for i := 2; ids[p.SPDXID]; i++ {
			p.SPDXID = fmt.Sprintf("SPDXRef-%s-%d", spdxIDPart(p.Name+"-"+p.VersionInfo), i)
		}
		ids[p.SPDXID] = true
		if p.DownloadLocation == "" {
			p.DownloadLocation = noAssertion
		}
		p.LicenseConcluded, p.LicenseDeclared, p.CopyrightText = noAssertion, noAssertion, noAssertion
		doc.Packages = append(doc.Packages, p)
		return p.SPDXID
	}
	relate := func(a, typ, b string) {
		doc.Relationships = append(doc.Relationships, spdxRelationship{Element: a, Type: typ, Related: b})
	}
	// A library two programs link is one package, which both depend on.
	libs := map[string]string{} // by name@version: its SPDX ID
	addLib := func(p spdxPackage) string {
		key := p.Name + "@" + p.VersionInfo
		if id, ok := libs[key]; ok {
			return id
		}
		libs[key] = add(p)
		return libs[key]
	}

	// The programs: each the main module at the release's version.
	var progIDs []string
	var infos []*debug.BuildInfo
	for _, prog := range programs {
		info, err := readBuildInfo(prog.bins)
		if err != nil {
			return nil, err
		}
		var arches []string
		for _, b := range prog.bins {
			arches = append(arches, strings.TrimPrefix(filepath.Base(b), prog.name+"-linux-"))
		}
		progIDs = append(progIDs, add(spdxPackage{
			Name: info.Main.Path, VersionInfo: version, Supplier: "Organization: nodevol",
			DownloadLocation: "git+" + checkout.Source + "@" + version, PrimaryPurpose: "APPLICATION",
			Comment:      fmt.Sprintf("the binary %s (%s, for linux/%s)", prog.name, info.Path, strings.Join(arches, ", linux/")),
			ExternalRefs: []spdxExternalRef{purl("pkg:golang/" + info.Main.Path + "@" + version)},
		}))
		infos = append(infos, info)
	}
	top := progIDs[0]
	if subject != "" {
		sum, err := fileSHA256(filepath.Join(dir, subject))
		if err != nil {
			return nil, err
		}
		top = add(spdxPackage{
			Name: registry + name, VersionInfo: version, Supplier: "Organization: nodevol",
			PrimaryPurpose: "CONTAINER", FilesAnalyzed: false,
			Checksums: []spdxChecksum{{Algorithm: "SHA256", Value: sum}},
			Comment:   "the OCI image layout tarball " + subject + ", the image " + registry + name + ":" + version + "@" + digest,
			ExternalRefs: []spdxExternalRef{purl("pkg:oci/" + name + "@" + strings.Replace(digest, ":", "%3A", 1) +
				"?repository_url=" + strings.TrimSuffix(registry, "/") + "/" + name + "&tag=" + version)},
		})
		for _, program := range progIDs {
			relate(top, "CONTAINS", program)
		}
	}
	doc.DocumentDescribes = []string{top}
	relate("SPDXRef-DOCUMENT", "DESCRIBES", top)
	for i, info := range infos {
		dependsOn(progIDs[i], info, version, addLib, relate)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// dependsOn adds (addLib) the Go standard library and the modules info
// says program links, and relates program to each.
func dependsOn(program string, info *debug.BuildInfo, version string, addLib func(spdxPackage) string, relate func(a, typ, b string)) {
	std := addLib(spdxPackage{
		Name: "stdlib", VersionInfo: info.GoVersion, Supplier: "Organization: Go",
		DownloadLocation: "https://go.dev/dl/", PrimaryPurpose: "LIBRARY",
		Comment:      "the Go standard library and runtime of the toolchain that built the binary",
		ExternalRefs: []spdxExternalRef{purl("pkg:golang/stdlib@" + info.GoVersion)},
	})
	relate(program, "DEPENDS_ON", std)
	for _, d := range info.Deps {
		m := d
		comment := ""
		if d.Replace != nil {
			m = d.Replace
			comment = "replaces " + d.Path + "@" + d.Version
		}
		p := spdxPackage{Name: m.Path, VersionInfo: m.Version, PrimaryPurpose: "LIBRARY", Comment: comment}
		if m.Version != "" && m.Version != "(devel)" {
			p.ExternalRefs = []spdxExternalRef{purl("pkg:golang/" + m.Path + "@" + m.Version)}
			p.DownloadLocation = "https://proxy.golang.org/" + m.Path + "/@v/" + m.Version + ".zip"
		} else {
			// A directory replacement (nodevol's own modules in
			// nodevol-kubelet): it is this release's source.
			p.VersionInfo, p.DownloadLocation = version, "git+"+checkout.Source+"@"+version
			p.Comment = strings.TrimPrefix(comment+"; from this release's source", "; ")
		}
		relate(program, "DEPENDS_ON", addLib(p))
	}
}

func purl(locator string) spdxExternalRef {
	return spdxExternalRef{Category: "PACKAGE-MANAGER", Type: "purl", Locator: locator}
}

// spdxIDPart is s in the characters an SPDX ID may hold (letters,
// digits, '.' and '-'), every other byte a '-'.
func spdxIDPart(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-') {
			b[i] = '-'
		}
	}
	return string(b)
}
