package emptydir_test

import (
	"os"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/emptydir"
)

// TestRefusalCodesDocumented: docs/cli.md's table of refusal reason codes
// has a row, with a remedy, for every code a refusing plan can carry, so
// an operator who reads a code in `teardown --json` or the kubelet's log
// finds what to do about it.
func TestRefusalCodesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		code := strings.Trim(strings.TrimSpace(cells[1]), "`")
		rows[code] = []string{strings.TrimSpace(cells[2]), strings.TrimSpace(cells[3])}
	}
	// The refusal codes are ReasonNestedMounts and every code after it.
	for c := emptydir.ReasonNestedMounts; ; c++ {
		name := c.String()
		if strings.HasPrefix(name, "ReasonCode(") {
			break
		}
		row, ok := rows[name]
		if !ok {
			t.Errorf("docs/cli.md has no row for the refusal code %s", name)
			continue
		}
		if row[0] == "" || row[1] == "" {
			t.Errorf("docs/cli.md's row for %s lacks the reason or the remedy: %q", name, row)
		}
	}
}
