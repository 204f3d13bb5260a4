// Command deploygen writes the raw manifests of deploy/ from nodevol's Helm
// chart rendered with its default values (helmchart.DeployFiles).
//
//	cd kubelet && go generate ./helmchart/
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodevol/nodevol/kubelet/helmchart"
)

func main() {
	chart := flag.String("chart", "../deploy/helm/nodevol", "the chart's directory")
	deploy := flag.String("deploy", "../deploy", "deploy/, where the files are written")
	flag.Parse()
	if err := run(*chart, *deploy); err != nil {
		fmt.Fprintln(os.Stderr, "deploygen:", err)
		os.Exit(1)
	}
}

func run(chart, deploy string) error {
	files, err := helmchart.Deploy(chart)
	if err != nil {
		return err
	}
	for _, g := range helmchart.DeployFiles {
		p := filepath.Join(deploy, filepath.FromSlash(g.File))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, files[g.File], 0o644); err != nil {
			return err
		}
	}
	return nil
}
