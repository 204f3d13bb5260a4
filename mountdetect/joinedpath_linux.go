package mountdetect

import "strings"

// joinedPath is a path held as parts joined by "/", compared with the
// table's mount points without being built: the kernel's name of a
// directory entry is its directory's joined with its name, and a scan
// asks about thousands of entries. Every part after the first is
// non-empty, so a path of several parts is neither "" nor "/".
type joinedPath struct {
	parts [4]string
	n     int
}

// pathOf is the path s as a joinedPath of one part.
func pathOf(s string) joinedPath { return joinedPath{parts: [4]string{s}, n: 1} }

// join is p joined with name by "/". Past four parts, or for an empty
// name, the last part is built (no caller gets there).
func (p joinedPath) join(name string) joinedPath {
	if name == "" || p.n == len(p.parts) {
		p.parts[p.n-1] += "/" + name
		return p
	}
	p.parts[p.n] = name
	p.n++
	return p
}

// String is the path built.
func (p *joinedPath) String() string { return strings.Join(p.parts[:p.n], "/") }

// walk follows s through the parts of p but the last, each followed by
// "/". ok is false when s leaves them, c then being the order of s
// against p (strings.Compare's); else rest is what follows them in s.
func (p *joinedPath) walk(s string) (rest string, c int, ok bool) {
	for _, part := range p.parts[:p.n-1] {
		if !isBeneath(s, part) {
			return "", compareWithDir(s, part), false
		}
		s = s[len(part)+1:]
	}
	return s, 0, true
}

// compare compares s with p (strings.Compare(s, p.String())).
func (p *joinedPath) compare(s string) int {
	rest, c, ok := p.walk(s)
	if !ok {
		return c
	}
	return strings.Compare(rest, p.parts[p.n-1])
}

// compareWithDir compares s with p followed by "/" (compareWithDir(s,
// p.String())).
func (p *joinedPath) compareWithDir(s string) int {
	rest, c, ok := p.walk(s)
	if !ok {
		return c
	}
	return compareWithDir(rest, p.parts[p.n-1])
}

// isBeneath reports whether s starts with p followed by "/" (isBeneath(s,
// p.String())).
func (p *joinedPath) isBeneath(s string) bool {
	rest, _, ok := p.walk(s)
	return ok && isBeneath(rest, p.parts[p.n-1])
}

// holds reports whether s is p or lies beneath it (cutDir(s, p.String())
// succeeds).
func (p *joinedPath) holds(s string) bool {
	if p.n == 1 {
		_, ok := cutDir(s, p.parts[0])
		return ok
	}
	return p.compare(s) == 0 || p.isBeneath(s)
}

// trimSlash is p without one trailing "/" (strings.TrimSuffix).
func (p joinedPath) trimSlash() joinedPath {
	last := &p.parts[p.n-1]
	if *last == "" && p.n > 1 {
		p.n-- // parts[n-2] + "/" + ""
		return p
	}
	*last = strings.TrimSuffix(*last, "/")
	return p
}

// cutDir is cutDir(p.String(), dir), the rest as a joinedPath.
func (p joinedPath) cutDir(dir string) (joinedPath, bool) {
	first := p.parts[0]
	switch {
	case p.n == 1:
		rest, ok := cutDir(first, dir)
		return pathOf(rest), ok
	case dir == "/":
		// p is not "/": the rest is p whole.
		return p, first == "" || first[0] == '/'
	case len(dir) <= len(first):
		// p is first + "/" + ...: dir holds p where it holds first, and
		// what follows first follows the rest.
		rest, ok := cutDir(first, dir)
		p.parts[0] = rest
		return p, ok
	}
	rest, ok := cutDir(p.String(), dir) // a mount point beneath the first part
	return pathOf(rest), ok
}

// under is root + p, for p "" or starting with "/" (the rest cutDir
// leaves).
func (p joinedPath) under(root string) joinedPath {
	first := p.parts[0]
	if first == "" {
		if p.n == 1 {
			return pathOf(root)
		}
		p.parts[0] = root // root + "" + "/" + ...
		return p
	}
	if p.n == len(p.parts) {
		p.parts[0] = root + first
		return p
	}
	// root + "/" + first[1:]: parts shift right by one.
	copy(p.parts[2:p.n+1], p.parts[1:p.n])
	p.parts[0], p.parts[1] = root, first[1:]
	p.n++
	if p.parts[1] == "" { // first was "/": keep every later part non-empty
		return pathOf(p.String())
	}
	return p
}
