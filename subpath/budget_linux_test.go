package subpath

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// TestExamineWithinBudget: Examine reads no more of a subPath tree than
// the budget it is given (a scan's per-pod share) and takes what it reads
// from it; past the budget, or past a directory's bound, it stops with an
// error matching volume.ErrTooManyEntries. Check, which must see
// everything, has no bound.
func TestExamineWithinBudget(t *testing.T) {
	e := newEnv(t)
	var specs []string
	for i := range 50 {
		specs = append(specs, fmt.Sprintf("dir app/%d", i))
	}
	mounttest.Build(t, e.subDir, specs...)

	b := volume.NewEntryBudget(100, 0)
	entries, refusal, err := e.cleaner.Examine(uid, emptydir.PluginName, "data", nil, WithinBudget(b))
	if err != nil || refusal != nil || len(entries) != 50 || b.Used() != 51 {
		t.Errorf("Examine within 100 entries = %d entries, %v, %v, %d used; want 50, none, 51 used (one container, 50 entries)", len(entries), refusal, err, b.Used())
	}
	for _, c := range []struct {
		name   string
		budget *volume.EntryBudget
		spent  bool
	}{
		{"pod budget", volume.NewEntryBudget(20, 0), true},
		{"directory bound", volume.NewEntryBudget(100, 10), false},
	} {
		entries, _, err := e.cleaner.Examine(uid, emptydir.PluginName, "data", nil, WithinBudget(c.budget))
		if !errors.Is(err, volume.ErrTooManyEntries) || entries != nil || c.budget.Spent() != c.spent || c.budget.Used() > 20 {
			t.Errorf("%s: Examine = %d entries, %v (spent %v, used %d); want an error matching ErrTooManyEntries, spent %v, at most 20 used",
				c.name, len(entries), err, c.budget.Spent(), c.budget.Used(), c.spent)
		}
	}
	if err := e.cleaner.Check(e.ctx, uid, emptydir.PluginName, "data"); err != nil {
		t.Errorf("Check = %v; want nil (no bound)", err)
	}
}
