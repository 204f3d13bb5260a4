package mountdetect

import (
	"errors"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

// MountChange is a mount that differs between two reads of the mount
// table: added, removed, or changed in any field the table gives (mount
// point, parent, filesystem and root, type, source, options,
// propagation). A rename of a directory above a mount point changes the
// mount point the kernel reports, so it is a change too, though it wakes
// no watch of the table.
type MountChange struct {
	Mount
	// ID is the mount's (classic) ID.
	ID int
	// Paths are the directories the change is at: the mount point, in
	// the older read and in the newer one, as the table names it and as
	// it is reached through every other mount of the filesystem it is
	// on (a second bind mount of a parent directory).
	Paths []string
	// Within are the same for every mount it is on top of or inside,
	// up to the namespace's root mount: a change there is beneath each
	// of those directories too.
	Within []string
}

// ChangesSince lists the mounts that differ between old and t, each
// once, in no particular order. Both tables must be non-nil.
//
// A mount unmounted and another made in its place between the two reads
// can leave the same line, byte for byte: the kernel hands out the lowest
// free classic ID, anonymous device number and peer group again. Where
// the kernel lists unique mount IDs (listmount(2), Linux 6.8), a mount of
// t whose unique ID old did not list is a change too, whatever its line.
func (t *MountTable) ChangesSince(old *MountTable) []MountChange {
	var out []MountChange
	seen := make(map[int]bool)
	for i := range t.entries {
		e := &t.entries[i]
		o, ok := old.byMountID(e.id)
		if ok && sameEntry(e, o) {
			continue
		}
		c := MountChange{Mount: e.Mount, ID: e.id}
		t.places(e, &c)
		if ok {
			old.places(o, &c)
		}
		seen[e.id] = true
		out = append(out, c)
	}
	for _, e := range t.replaced(old, seen) {
		c := MountChange{Mount: e.Mount, ID: e.id}
		t.places(e, &c)
		if o, ok := old.byMountID(e.id); ok {
			old.places(o, &c)
		}
		seen[e.id] = true
		out = append(out, c)
	}
	for i := range old.entries {
		o := &old.entries[i]
		if seen[o.id] {
			continue
		}
		if _, ok := t.byMountID(o.id); ok {
			continue // the same in both
		}
		c := MountChange{Mount: o.Mount, ID: o.id}
		old.places(o, &c)
		out = append(out, c)
	}
	return out
}

// replaced lists the entries of t, not in seen, that are mounts old did
// not list though their lines are the same: each unique ID of t that old
// lacks is looked up (statmount(2)) for its classic ID. One that is gone
// since is no entry of t that needs it: what replaced it is a new ID at
// the next read. When a lookup fails otherwise, every entry of t is
// listed: none is proven the same mount.
func (t *MountTable) replaced(old *MountTable, seen map[int]bool) []*tableEntry {
	if t.unique == nil || old.unique == nil {
		return nil
	}
	var out []*tableEntry
	j := 0
	for _, u := range t.unique {
		for j < len(old.unique) && old.unique[j] < u {
			j++
		}
		if j < len(old.unique) && old.unique[j] == u {
			continue
		}
		sm, err := fsat.StatmountOf(u)
		switch {
		case errors.Is(err, unix.ENOENT):
			continue
		case err != nil:
			out = out[:0]
			for i := range t.entries {
				if !seen[t.entries[i].id] {
					out = append(out, &t.entries[i])
				}
			}
			return out
		}
		if e, ok := t.byMountID(int(sm.ID)); ok && !seen[e.id] && !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out
}

func sameEntry(a, b *tableEntry) bool {
	return a.id == b.id && a.parent == b.parent && a.dev == b.dev && a.root == b.root &&
		a.Mount == b.Mount && a.vfsOptions == b.vfsOptions && a.fsOptions == b.fsOptions && a.optional == b.optional
}

// places adds to c where e is in t: its mount point through every mount
// of its parent's filesystem (Paths), and the same for each mount above
// it (Within).
func (t *MountTable) places(e *tableEntry, c *MountChange) {
	c.Paths = t.aliases(e, c.Paths)
	seen := map[int]bool{e.id: true}
	for {
		p, ok := t.byMountID(e.parent)
		if !ok || seen[p.id] {
			return
		}
		seen[p.id] = true
		c.Within = t.aliases(p, c.Within)
		e = p
	}
}

// aliases appends to out e's mount point and every other path of the
// same directory: its position in the parent's filesystem seen through
// each mount of that filesystem whose root holds it.
func (t *MountTable) aliases(e *tableEntry, out []string) []string {
	out = append(out, e.MountPoint)
	p, ok := t.byMountID(e.parent)
	if !ok || p.id == e.id {
		return out
	}
	jp, ok := p.position(pathOf(e.MountPoint))
	if !ok {
		return out
	}
	pos := jp.String()
	for i := range t.entries {
		m := &t.entries[i]
		if m.dev != p.dev || m.id == p.id {
			continue
		}
		rest, ok := cutDir(pos, m.root)
		if !ok {
			continue
		}
		out = append(out, strings.TrimSuffix(m.MountPoint, "/")+rest)
	}
	return out
}
