//go:build linux

// Command nodefixture makes a kubelet root shaped like a busy node
// (internal/testsupport/nodefixture): hack/serve-steady-state.sh runs it in a private
// mount namespace.
//
//	nodefixture -root DIR [-pods 1000] [-mounted=true]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/nodevol/nodevol/internal/testsupport/nodefixture"
)

func main() {
	root := flag.String("root", "", "the kubelet root to make (must not exist)")
	pods := flag.Int("pods", 1000, "pods, of 10 volume directories each")
	mounted := flag.Bool("mounted", true, "add one mount per pod (root only; run in a private mount namespace)")
	flag.Parse()
	if *root == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: nodefixture -root DIR [-pods N] [-mounted=false]")
		os.Exit(2)
	}
	s := nodefixture.Shape{Pods: *pods, Mounted: *mounted}
	if err := nodefixture.Make(*root, s); err != nil {
		fmt.Fprintf(os.Stderr, "nodefixture: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %d pods, %d volume directories, %d mounts (%d in use, %d in danger, %d subPath binds)\n",
		*root, s.Pods, s.Pods*nodefixture.VolumesPerPod, s.InUse()+s.Danger()+s.Subpaths(), s.InUse(), s.Danger(), s.Subpaths())
}
