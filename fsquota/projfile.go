package fsquota

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The bookkeeping files use the formats xfs_quota reads:
//
//	/etc/projects   id:path      one line per directory
//	/etc/projid     name:id      one line per project
//
// A parsed file remembers every line verbatim. Lines this package does not
// understand (comments, blanks, garbage, entries of other tools) are
// written back unchanged; only the lines of entries it adds or removes
// change.

// projectLine is one line of a projects file.
type projectLine struct {
	raw  string // the line as read, without its newline
	ok   bool   // parsed as id:path
	id   uint32
	path string
}

// projidLine is one line of a projid file.
type projidLine struct {
	raw  string
	ok   bool // parsed as name:id
	name string
	id   uint32
}

// projectsFile is a parsed projects file.
type projectsFile struct{ lines []projectLine }

// projidFile is a parsed projid file.
type projidFile struct{ lines []projidLine }

// splitLines splits data into lines without their "\n"; a final line
// without a newline is kept, an empty tail is not a line.
func splitLines(data string) []string {
	if data == "" {
		return nil
	}
	lines := strings.Split(data, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// parseID parses a project ID: decimal, no sign, no spaces, not 0 and not
// 0xffffffff (the kernel's "no ID").
func parseID(s string) (uint32, bool) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 || n == 1<<32-1 {
		return 0, false
	}
	return uint32(n), true
}

// validEntryPath reports whether path can be written as the path of a
// projects line: absolute, no newline.
func validEntryPath(path string) bool {
	return strings.HasPrefix(path, "/") && !strings.ContainsAny(path, "\n\x00")
}

// validName reports whether name can be written as the name of a projid
// line: not empty, no ':', '#', newline or NUL, and not starting with a
// space.
func validName(name string) bool {
	return name != "" && !strings.ContainsAny(name, ":#\n\x00") && name[0] != ' ' && name[0] != '\t'
}

func parseProjects(data string) *projectsFile {
	f := &projectsFile{}
	for _, raw := range splitLines(data) {
		l := projectLine{raw: raw}
		if !strings.HasPrefix(raw, "#") {
			idStr, path, found := strings.Cut(raw, ":")
			if id, ok := parseID(idStr); found && ok && validEntryPath(path) {
				l.ok, l.id, l.path = true, id, path
			}
		}
		f.lines = append(f.lines, l)
	}
	return f
}

func parseProjid(data string) *projidFile {
	f := &projidFile{}
	for _, raw := range splitLines(data) {
		l := projidLine{raw: raw}
		if i := strings.LastIndexByte(raw, ':'); i >= 0 && !strings.HasPrefix(raw, "#") {
			if id, ok := parseID(raw[i+1:]); ok && validName(raw[:i]) {
				l.ok, l.name, l.id = true, raw[:i], id
			}
		}
		f.lines = append(f.lines, l)
	}
	return f
}

func (f *projectsFile) bytes() []byte {
	var b strings.Builder
	for _, l := range f.lines {
		b.WriteString(l.raw)
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

func (f *projidFile) bytes() []byte {
	var b strings.Builder
	for _, l := range f.lines {
		b.WriteString(l.raw)
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// idForPath returns the ID of the first entry for path.
func (f *projectsFile) idForPath(path string) (uint32, bool) {
	for _, l := range f.lines {
		if l.ok && l.path == path {
			return l.id, true
		}
	}
	return 0, false
}

// idsForPath lists the IDs recorded for path.
func (f *projectsFile) idsForPath(path string) []uint32 {
	var ids []uint32
	for _, l := range f.lines {
		if l.ok && l.path == path {
			ids = append(ids, l.id)
		}
	}
	return ids
}

// pathsForID lists the paths recorded for id.
func (f *projectsFile) pathsForID(id uint32) []string {
	var paths []string
	for _, l := range f.lines {
		if l.ok && l.id == id {
			paths = append(paths, l.path)
		}
	}
	return paths
}

// add records id:path unless that exact entry exists; it reports whether
// the file changed.
func (f *projectsFile) add(id uint32, path string) (bool, error) {
	if !validEntryPath(path) {
		return false, fmt.Errorf("path %q cannot be recorded in a projects file", path)
	}
	for _, l := range f.lines {
		if l.ok && l.id == id && l.path == path {
			return false, nil
		}
	}
	raw := strconv.FormatUint(uint64(id), 10) + ":" + path
	f.lines = append(f.lines, projectLine{raw: raw, ok: true, id: id, path: path})
	return true, nil
}

// removePath drops every entry for path and returns the IDs they had.
func (f *projectsFile) removePath(path string) []uint32 {
	var ids []uint32
	kept := f.lines[:0]
	for _, l := range f.lines {
		if l.ok && l.path == path {
			ids = append(ids, l.id)
			continue
		}
		kept = append(kept, l)
	}
	f.lines = kept
	return ids
}

// hasID reports whether any entry uses id.
func (f *projectsFile) hasID(id uint32) bool {
	return slices.ContainsFunc(f.lines, func(l projectLine) bool { return l.ok && l.id == id })
}

func (f *projidFile) hasID(id uint32) bool {
	return slices.ContainsFunc(f.lines, func(l projidLine) bool { return l.ok && l.id == id })
}

func (f *projidFile) hasName(name string) bool {
	return slices.ContainsFunc(f.lines, func(l projidLine) bool { return l.ok && l.name == name })
}

// add records name:id unless id already has a name; it reports whether the
// file changed.
func (f *projidFile) add(name string, id uint32) (bool, error) {
	if f.hasID(id) {
		return false, nil
	}
	if !validName(name) {
		return false, fmt.Errorf("project name %q cannot be recorded in a projid file", name)
	}
	if f.hasName(name) {
		return false, fmt.Errorf("project name %q is already recorded for another ID", name)
	}
	raw := name + ":" + strconv.FormatUint(uint64(id), 10)
	f.lines = append(f.lines, projidLine{raw: raw, ok: true, name: name, id: id})
	return true, nil
}

// removeID drops every entry for id; it reports whether the file changed.
func (f *projidFile) removeID(id uint32) bool {
	kept := f.lines[:0]
	for _, l := range f.lines {
		if l.ok && l.id == id {
			continue
		}
		kept = append(kept, l)
	}
	changed := len(kept) != len(f.lines)
	f.lines = kept
	return changed
}
