package emptydir

import (
	"github.com/nodevol/nodevol/volume"
)

type mounter struct {
	plugin *Plugin
	source volume.EmptyDirSource
	pod    *volume.Pod
	name   string
	ref    volRef
	dir    string
}

func (m *mounter) Path() string { return m.dir }

func (m *mounter) setUpErr(kind volume.FailureKind, err error) error {
	return &volume.OperationError{Kind: kind, Op: "SetUp", Path: m.dir, Err: err}
}
