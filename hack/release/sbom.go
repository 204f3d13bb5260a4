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

// sbom is the SPDX 2.3 JSON document of the Go modules in bins (one
// program built for several architectures), read from their build info:
// the main module, every module it links (after replacements, as the
// build used them) and the Go standard library of the toolchain. subject,
// when not empty, is the image tarball in dir holding the binaries: the
// document describes it, with its SHA-256 and a package URL naming the
// image by digest (its image index's), and it contains the program.
// Created is the commit's time, so that the document is reproducible.
func sbom(name, version string, created time.Time, bins []string, subject, digest, dir string) ([]byte, error) {
	info, err := readBuildInfo(bins)
	if err != nil {
		return nil, err
	}
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

	// The program: the main module at the release's version.
	var arches []string
	for _, b := range bins {
		arches = append(arches, strings.TrimPrefix(filepath.Base(b), name+"-linux-"))
	}
	program := add(spdxPackage{
		Name: info.Main.Path, VersionInfo: version, Supplier: "Organization: nodevol",
		DownloadLocation: "git+" + checkout.Source + "@" + version, PrimaryPurpose: "APPLICATION",
		Comment:      fmt.Sprintf("the binary %s (%s, for linux/%s)", name, info.Path, strings.Join(arches, ", linux/")),
		ExternalRefs: []spdxExternalRef{purl("pkg:golang/" + info.Main.Path + "@" + version)},
	})
	top := program
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
		relate(top, "CONTAINS", program)
	}
	doc.DocumentDescribes = []string{top}
	relate("SPDXRef-DOCUMENT", "DESCRIBES", top)
	std := add(spdxPackage{
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
		relate(program, "DEPENDS_ON", add(p))
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
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
