// Package subpath cleans the bind mounts the kubelet makes for containers'
// subPath volume mounts, kept at
// <root>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>, before
// the volume itself is torn down.
//
// Clean unmounts each <index> entry that is a mount point (never lazily: a
// busy mount is an error naming its path), then removes the emptied
// entries and directories with rmdir or, for a file entry (the subPath of a
// file) that is no longer a mount point, unlink. Nothing is ever removed
// recursively, nothing is entered across a mount, and symlinks are never
// followed: a symlink planted in the tree is unlinked as a link. A mount
// anywhere else under the subpath tree (not at an <index>) is foreign: it
// is reported and left, with the directories that hold it. Missing
// directories are success.
package subpath

import (
	"context"
	"errors"

	"github.com/nodevol/nodevol/volume"
)

// ErrLeft is matched by the error of a Clean that left something behind.
var ErrLeft = errors.New("subpath entries left in place")

// Entry is one <container>/<index> entry of a volume's subpath tree.
type Entry struct {
	Container  string `json:"container"`
	Index      string `json:"index"`
	Path       string `json:"path"`
	MountPoint bool   `json:"mountPoint"`
}

// Cleaner cleans subpaths under one kubelet root. It implements
// executor.SubpathCleaner.
type Cleaner struct {
	layout volume.Layout
}

// New returns a Cleaner for layout's root.
func New(layout volume.Layout) *Cleaner { return &Cleaner{layout: layout} }

// Clean removes the subpath bind mounts and directories of a pod's volume.
func (c *Cleaner) Clean(ctx context.Context, podUID, vol string) error {
	dir, err := c.layout.VolumeSubpathsDir(podUID, vol)
	if err != nil {
		return err
	}
	return clean(ctx, dir)
}

// List returns a pod volume's subpath entries (for `nodevol scan`), sorted
// by container and index. Entries it could not examine are left out and
// named in the error, which may come with the entries it did list.
func (c *Cleaner) List(podUID, vol string) ([]Entry, error) {
	dir, err := c.layout.VolumeSubpathsDir(podUID, vol)
	if err != nil {
		return nil, err
	}
	return list(dir)
}
