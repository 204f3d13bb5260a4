// Command upstream runs upstream test files — Kubernetes's and Go's own —
// against nodevol, unmodified, and reports per suite how many tests passed,
// failed, skipped themselves or are not applicable.
//
//	go run ./hack/upstream [-suite NAME] [-list] [-run REGEXP] [-uid UID] [-- go test flags]
//
// (from the kubelet/ directory). Each suite is a package directory
// upstream/<name>/ whose UPSTREAM file says which upstream files it runs,
// pinned by version and sha256:
//
//	source k8s.io/kubernetes@v1.37.2 pkg/volume/emptydir/empty_dir_test.go sha256:<hex>
//	source go@go1.26.8 src/os/os_test.go sha256:<hex>
//	extract TestRemoveAllRace             (last source: only these top-level declarations)
//	rewrite `. "os"` `. "github.com/nodevol/nodevol/kubelet/upstream/osremoveall/os"`
//	flags -race -count=20                 (extra go test flags)
//	notapplicable TestName reason ...     (not run: why it cannot apply)
//	differs TestName `error text` reason  (fails only with lines containing the text: a deliberate difference)
//	unprivileged 65534                    (as root, also run the suite as this uid and gid)
//
// Some upstream tests only mean something without root's permission bypass
// (they skip themselves as root). With -uid, or an unprivileged line when
// the driver runs as root, the suite's test binary is built (go test -c,
// same overlay) and run as that uid and gid with no supplementary groups
// and no capabilities (setpriv), its output read through go tool test2json;
// that run is its own row of the table, "NAME (uid UID)". Build flags of
// flags lines and of the go test flags (-race, -tags, ...) go to the build,
// test flags (-count=20, ...) to the binary as -test.count=20; a flag's
// value must then be given with "=".
//
// Kubernetes files come from the module cache (go mod download, so from the
// Go module proxy); Go's from GOROOT, whose version must be the pinned one.
// A file whose sha256 differs is an error. Files are added to the suite's
// package with go test -overlay, so nothing is copied into the tree; only a
// source with extract or rewrite lines is changed, in a temporary file, by
// exactly those lines (a rewrite that does not match is an error).
//
// A test counts as passed only when it ran and passed; a test that skipped
// itself is counted apart with its reason; a "differs" test must fail, and
// only with the listed text. The exit status is 0 when every suite has no
// failure and every listed test exists.
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
)

func main() {
	suiteFlag := flag.String("suite", "", "run only this suite (a directory name under upstream/)")
	list := flag.Bool("list", false, "print the suites and their upstream files, run nothing")
	runFlag := flag.String("run", "", "passed to go test -run (a subset of the suite's tests)")
	uidFlag := flag.Int("uid", -1, "run the suites' test binaries as this uid and gid (needs root), instead of as the current user")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./hack/upstream [-suite NAME] [-list] [-run REGEXP] [-uid UID] [-- go test flags]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	root, err := moduleRoot()
	if err != nil {
		fatal(err)
	}
	suites, err := loadSuites(filepath.Join(root, "upstream"), *suiteFlag)
	if err != nil {
		fatal(err)
	}
	if *list {
		for _, s := range suites {
			fmt.Printf("%s:\n", s.name)
			for _, src := range s.sources {
				fmt.Printf("  %s %s\n", src.module, src.path)
			}
		}
		return
	}
	var results []*result
	failed := false
	for _, s := range suites {
		uids := []int{*uidFlag}
		if *uidFlag < 0 && os.Geteuid() == 0 {
			uids = append(uids, s.unprivileged...)
		}
		for _, uid := range uids {
			r, err := s.run(root, *runFlag, flag.Args(), uid)
			if err != nil {
				fmt.Fprintf(os.Stderr, "upstream: %s: %v\n", s.name, err)
				failed = true
				if r == nil {
					continue
				}
			}
			results = append(results, r)
			failed = failed || !r.ok()
		}
	}
	writeTable(os.Stdout, results)
	if failed {
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "upstream: %v\n", err)
	os.Exit(2)
}

// moduleRoot is the kubelet/ module's directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/nodevol/nodevol/kubelet").Output()
	if err != nil {
		return "", fmt.Errorf("find the kubelet module (run from kubelet/): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// source is one upstream file of a suite.
type source struct {
	module  string // k8s.io/kubernetes@v1.37.2 or go@go1.26.8
	path    string // within the module (or GOROOT)
	sha256  string
	extract []string // top-level declarations to keep; all when empty
	rewrite [][2]string
}

// expectation is a test that is not run, or that must fail in a known way.
type expectation struct {
	test   string
	text   string // differs: every error line must contain it
	reason string
}

type suite struct {
	name, dir     string
	sources       []*source
	flags         []string
	notApplicable []expectation
	differs       []expectation
	unprivileged  []int // uids to also run as, when running as root
}

func loadSuites(dir, only string) ([]*suite, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var suites []*suite
	for _, e := range entries {
		if !e.IsDir() || (only != "" && e.Name() != only) {
			continue
		}
		f := filepath.Join(dir, e.Name(), "UPSTREAM")
		if _, err := os.Stat(f); errors.Is(err, os.ErrNotExist) {
			continue
		}
		s, err := parseSuite(e.Name(), filepath.Join(dir, e.Name()), f)
		if err != nil {
			return nil, err
		}
		suites = append(suites, s)
	}
	if only != "" && len(suites) == 0 {
		return nil, fmt.Errorf("no suite %q under %s", only, dir)
	}
	return suites, nil
}

// fields splits a line into words, a `quoted` word (backquotes) being one.
func fields(line string) ([]string, error) {
	var out []string
	for line = strings.TrimSpace(line); line != ""; line = strings.TrimSpace(line) {
		if line[0] == '`' {
			end := strings.IndexByte(line[1:], '`')
			if end < 0 {
				return nil, fmt.Errorf("unterminated ` in %q", line)
			}
			out = append(out, line[1:1+end])
			line = line[2+end:]
			continue
		}
		word, rest, _ := strings.Cut(line, " ")
		out = append(out, word)
		line = rest
	}
	return out, nil
}

func parseSuite(name, dir, file string) (*suite, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	s := &suite{name: name, dir: dir}
	for i, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line == "" || line[0] == '#' {
			continue
		}
		w, err := fields(line)
		bad := func(why string) error { return fmt.Errorf("%s:%d: %s: %q", file, i+1, why, line) }
		if err != nil {
			return nil, bad(err.Error())
		}
		var last *source
		if len(s.sources) > 0 {
			last = s.sources[len(s.sources)-1]
		}
		switch {
		case w[0] == "source" && len(w) == 4 && strings.HasPrefix(w[3], "sha256:"):
			s.sources = append(s.sources, &source{module: w[1], path: w[2], sha256: strings.TrimPrefix(w[3], "sha256:")})
		case w[0] == "extract" && len(w) >= 2 && last != nil:
			last.extract = append(last.extract, w[1:]...)
		case w[0] == "rewrite" && len(w) == 3 && last != nil:
			last.rewrite = append(last.rewrite, [2]string{w[1], w[2]})
		case w[0] == "flags":
			s.flags = append(s.flags, w[1:]...)
		case w[0] == "notapplicable" && len(w) >= 3:
			s.notApplicable = append(s.notApplicable, expectation{test: w[1], reason: strings.Join(w[2:], " ")})
		case w[0] == "differs" && len(w) >= 4:
			s.differs = append(s.differs, expectation{test: w[1], text: w[2], reason: strings.Join(w[3:], " ")})
		case w[0] == "unprivileged" && len(w) == 2:
			uid, err := strconv.Atoi(w[1])
			if err != nil || uid <= 0 {
				return nil, bad("want a non-root uid")
			}
			s.unprivileged = append(s.unprivileged, uid)
		default:
			return nil, bad("not a source, extract, rewrite, flags, notapplicable, differs or unprivileged line")
		}
	}
	if len(s.sources) == 0 {
		return nil, fmt.Errorf("%s: no source line", file)
	}
	return s, nil
}

// locate returns the file's path on this machine: in the module cache
// (downloading the module through the Go module proxy when needed) or in
// GOROOT.
func (src *source) locate() (string, error) {
	mod, version, ok := strings.Cut(src.module, "@")
	if !ok {
		return "", fmt.Errorf("source %q: want module@version", src.module)
	}
	if mod == "go" {
		if v := runtime.Version(); v != version {
			return "", fmt.Errorf("source %s %s: pinned to %s, but this is %s", src.module, src.path, version, v)
		}
		goroot, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			return "", fmt.Errorf("go env GOROOT: %w", err)
		}
		return filepath.Join(strings.TrimSpace(string(goroot)), filepath.FromSlash(src.path)), nil
	}
	out, err := exec.Command("go", "mod", "download", "-json", src.module).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", src.module, err)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", src.module, err)
	}
	if info.Error != "" {
		return "", fmt.Errorf("go mod download %s: %s", src.module, info.Error)
	}
	return filepath.Join(info.Dir, filepath.FromSlash(src.path)), nil
}

// materialize checks the file's sha256 and returns the path the overlay
// names: the upstream file itself, or a temporary file with the extract
// and rewrite lines applied.
func (src *source) materialize(tmp string) (string, error) {
	path, err := src.locate()
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != src.sha256 {
		return "", fmt.Errorf("%s: sha256 %s, pinned %s", path, got, src.sha256)
	}
	if len(src.extract) == 0 && len(src.rewrite) == 0 {
		return path, nil
	}
	if len(src.extract) > 0 {
		if data, err = extract(path, data, src.extract); err != nil {
			return "", err
		}
	}
	for _, rw := range src.rewrite {
		if !bytes.Contains(data, []byte(rw[0])) {
			return "", fmt.Errorf("%s: rewrite %q matches nothing", path, rw[0])
		}
		data = bytes.ReplaceAll(data, []byte(rw[0]), []byte(rw[1]))
	}
	out := filepath.Join(tmp, strings.ReplaceAll(src.path, "/", "_"))
	return out, os.WriteFile(out, data, 0o644)
}

// extract keeps the package clause, the imports the kept declarations use,
// and the named top-level declarations, each as its original text.
func extract(path string, data []byte, names []string) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, data, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	text := func(n ast.Node) string {
		return string(data[fset.Position(n.Pos()).Offset:fset.Position(n.End()).Offset])
	}
	var kept []string
	used := map[string]bool{}
	found := map[string]bool{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Recv != nil || !slices.Contains(names, fd.Name.Name) {
			continue
		}
		found[fd.Name.Name] = true
		start := fd.Pos()
		if fd.Doc != nil {
			start = fd.Doc.Pos()
		}
		kept = append(kept, string(data[fset.Position(start).Offset:fset.Position(fd.End()).Offset]))
		ast.Inspect(fd, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok {
					used[id.Name] = true
				}
			}
			return true
		})
	}
	for _, n := range names {
		if !found[n] {
			return nil, fmt.Errorf("%s: no top-level function %s to extract", path, n)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// Code extracted from %s by hack/upstream: the functions %s, verbatim. DO NOT EDIT.\n\npackage %s\n\nimport (\n",
		filepath.Base(path), strings.Join(names, ", "), f.Name.Name)
	for _, imp := range f.Imports {
		p := strings.Trim(imp.Path.Value, `"`)
		name := filepath.Base(p)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		if name == "." || used[name] {
			b.WriteString("\t" + text(imp) + "\n")
		}
	}
	b.WriteString(")\n\n")
	b.WriteString(strings.Join(kept, "\n\n"))
	b.WriteString("\n")
	return []byte(b.String()), nil
}

// declaredTests lists the Test functions the files declare.
func declaredTests(files []string) ([]string, error) {
	var tests []string
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return nil, err
		}
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Test") && fd.Name.Name != "TestMain" {
				tests = append(tests, fd.Name.Name)
			}
		}
	}
	return tests, nil
}

// result is one suite's outcome.
type result struct {
	suite         string
	files         []string // the upstream files, as module path
	flags         []string
	passed        []string
	failed        []string // unexpected failures, and differs tests that passed or failed otherwise
	skipped       map[string]string
	notApplicable []expectation
	differs       []expectation
	problems      []string // listed tests that do not exist, and the like
}

func (r *result) ok() bool { return len(r.failed) == 0 && len(r.problems) == 0 }

// run runs the suite: with go test, or, for uid >= 0, as a test binary
// run as that uid.
func (s *suite) run(root, runRE string, extra []string, uid int) (*result, error) {
	tmp, err := os.MkdirTemp("", "nodevol-upstream-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	name := s.name
	if uid >= 0 {
		name = fmt.Sprintf("%s (uid %d)", s.name, uid)
		// The binary in it must be reachable by uid.
		if err := os.Chmod(tmp, 0o755); err != nil {
			return nil, err
		}
	}
	overlay := map[string]string{}
	var files []string
	r := &result{suite: name, flags: s.flags, skipped: map[string]string{}, notApplicable: s.notApplicable, differs: s.differs}
	for _, src := range s.sources {
		p, err := src.materialize(tmp)
		if err != nil {
			return nil, err
		}
		target := filepath.Join(s.dir, "zz_upstream_"+filepath.Base(src.path))
		if _, err := os.Stat(target); err == nil {
			return nil, fmt.Errorf("%s exists: the overlay adds it; remove the copy", target)
		}
		overlay[target] = p
		files = append(files, p)
		r.files = append(r.files, src.module+"/"+src.path)
	}
	declared, err := declaredTests(files)
	if err != nil {
		return nil, err
	}
	for _, e := range append(slices.Clone(s.notApplicable), s.differs...) {
		if !slices.Contains(declared, e.test) {
			r.problems = append(r.problems, fmt.Sprintf("%s is listed in UPSTREAM but the upstream files declare no such test", e.test))
		}
	}
	ov, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		return nil, err
	}
	ovFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o644); err != nil {
		return nil, err
	}
	testArgs := slices.Clone(s.flags)
	if len(s.notApplicable) > 0 {
		var names []string
		for _, e := range s.notApplicable {
			names = append(names, regexp.QuoteMeta(e.test))
		}
		testArgs = append(testArgs, "-skip=^("+strings.Join(names, "|")+")$")
	}
	if runRE != "" {
		testArgs = append(testArgs, "-run="+runRE)
	}
	testArgs = append(testArgs, extra...)
	pkg := "./upstream/" + s.name
	var cmd *exec.Cmd
	if uid < 0 {
		cmd = exec.Command("go", append(append([]string{"test", "-json", "-overlay", ovFile}, testArgs...), pkg)...)
		cmd.Dir = root
	} else {
		if cmd, err = s.unprivilegedCmd(root, tmp, ovFile, pkg, testArgs, uid); err != nil {
			return nil, err
		}
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "== %s: %s\n", name, strings.Join(cmd.Args, " "))
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	outcomes, output, perr := readEvents(out)
	werr := cmd.Wait()
	if perr != nil {
		return r, perr
	}
	for _, test := range declared {
		if slices.ContainsFunc(s.notApplicable, func(e expectation) bool { return e.test == test }) {
			continue
		}
		runs := outcomes[test]
		if len(runs) == 0 {
			if runRE == "" {
				r.failed = append(r.failed, test+" (did not run)")
			}
			continue
		}
		r.classify(test, runs, output[test], s.differs)
	}
	if werr != nil && len(r.failed) == 0 && len(r.problems) == 0 && len(s.differs) == 0 {
		return r, fmt.Errorf("go test: %w", werr)
	}
	return r, nil
}

// buildFlags are the go test flags that go to the build of a test binary
// (go help build); every other flag is the binary's own.
var buildFlags = []string{"race", "msan", "asan", "cover", "covermode", "coverpkg", "tags", "gcflags", "ldflags", "asmflags", "trimpath", "mod", "a"}

// unprivilegedCmd builds the suite's test binary into tmp and returns the
// command that runs it as uid (and gid uid, no supplementary groups, no
// capabilities) in the package directory, as go test would, its output
// turned into go test -json's by test2json.
func (s *suite) unprivilegedCmd(root, tmp, ovFile, pkg string, args []string, uid int) (*exec.Cmd, error) {
	bin := filepath.Join(tmp, s.name+".test")
	build := []string{"test", "-c", "-o", bin, "-overlay", ovFile}
	run := []string{"-test.v=test2json"}
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case !strings.HasPrefix(a, "-"):
			return nil, fmt.Errorf("go test argument %q: as uid %d, give flag values with = (-count=20)", a, uid)
		case slices.Contains(buildFlags, name):
			build = append(build, a)
		default:
			run = append(run, "-test."+strings.TrimLeft(a, "-"))
		}
	}
	cmd := exec.Command("go", append(build, pkg)...)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	fmt.Fprintf(os.Stderr, "== %s: go %s\n", s.name, strings.Join(cmd.Args[1:], " "))
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("build the test binary: %w", err)
	}
	id := strconv.Itoa(uid)
	testArgs := append([]string{"tool", "test2json", "-t", "-p", pkg,
		"setpriv", "--reuid=" + id, "--regid=" + id, "--clear-groups", "--inh-caps=-all", bin}, run...)
	cmd = exec.Command("go", testArgs...)
	cmd.Dir = s.dir
	return cmd, nil
}

// classify sorts one test's runs (several with -count) into the result.
func (r *result) classify(test string, runs []string, output []string, differs []expectation) {
	di := slices.IndexFunc(differs, func(e expectation) bool { return e.test == test })
	switch {
	case di >= 0:
		// Must fail, and every error line must carry the expected text.
		if slices.Contains(runs, "pass") {
			r.failed = append(r.failed, test+" (listed as differing, but passed)")
			return
		}
		for _, line := range errorLines(output) {
			if !strings.Contains(line, differs[di].text) {
				r.failed = append(r.failed, fmt.Sprintf("%s (failed otherwise than listed: %s)", test, line))
				return
			}
		}
	case slices.Contains(runs, "fail"):
		r.failed = append(r.failed, test)
		fmt.Fprintf(os.Stderr, "--- %s failed:\n%s", test, strings.Join(output, ""))
	case slices.Contains(runs, "skip"):
		r.skipped[test] = skipReason(output)
	default:
		r.passed = append(r.passed, test)
	}
}

// errorLines are a failed test's messages: the indented lines of its
// output that are not framing (=== RUN, --- FAIL).
func errorLines(output []string) []string {
	var lines []string
	for _, l := range output {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") || !strings.HasPrefix(l, "    ") {
			continue
		}
		lines = append(lines, t)
	}
	return lines
}

func skipReason(output []string) string {
	if lines := errorLines(output); len(lines) > 0 {
		return lines[len(lines)-1]
	}
	return "skipped"
}

// readEvents reads go test -json output: each top-level test's outcomes
// and its output (its subtests' included).
func readEvents(r io.Reader) (map[string][]string, map[string][]string, error) {
	outcomes := map[string][]string{}
	output := map[string][]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct{ Action, Test, Output string }
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			fmt.Fprintln(os.Stderr, sc.Text()) // build errors and the like
			continue
		}
		if ev.Test == "" {
			if ev.Action == "output" && !strings.HasPrefix(ev.Output, "ok ") && !strings.HasPrefix(ev.Output, "PASS") && !strings.HasPrefix(ev.Output, "FAIL\t") {
				fmt.Fprint(os.Stderr, ev.Output)
			}
			continue
		}
		top, _, sub := strings.Cut(ev.Test, "/")
		switch ev.Action {
		case "output":
			output[top] = append(output[top], ev.Output)
		case "pass", "fail", "skip":
			if !sub {
				outcomes[top] = append(outcomes[top], ev.Action)
			}
		}
	}
	return outcomes, output, sc.Err()
}

// writeTable prints the per-suite counts and every test that is not a
// plain pass, with its reason, as Markdown (docs/upstream-tests.md
// records it).
func writeTable(w io.Writer, results []*result) {
	fmt.Fprintln(w, "| suite | upstream files | passed | failed | skipped by the test | not applicable | deliberate differences |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %d | %d |\n", r.suite, strings.Join(r.files, "<br>"),
			len(r.passed), len(r.failed), len(r.skipped), len(r.notApplicable), len(r.differs))
	}
	for _, r := range results {
		if len(r.failed)+len(r.skipped)+len(r.notApplicable)+len(r.differs)+len(r.problems) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", r.suite)
		for _, f := range r.failed {
			fmt.Fprintf(w, "- FAILED %s\n", f)
		}
		for _, p := range r.problems {
			fmt.Fprintf(w, "- PROBLEM %s\n", p)
		}
		names := make([]string, 0, len(r.skipped))
		for n := range r.skipped {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "- skipped by the test: %s — %s\n", n, r.skipped[n])
		}
		for _, e := range r.notApplicable {
			fmt.Fprintf(w, "- not applicable: %s — %s\n", e.test, e.reason)
		}
		for _, e := range r.differs {
			fmt.Fprintf(w, "- deliberate difference: %s — %s\n", e.test, e.reason)
		}
	}
}
