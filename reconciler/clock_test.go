package reconciler

import (
	"testing"
	"testing/synctest"
	"time"

	testclock "k8s.io/utils/clock/testing"
)

// TestBackoffFollowsTheClock drives time with a fake clock: a failed
// TearDown is retried only when the clock passes its backoff (500ms, then
// 1s), never earlier, whatever the loop is woken by meanwhile.
func TestBackoffFollowsTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testclock.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
		e := startManager(t, t.TempDir(), Options{Clock: c, InitialBackoff: 500 * time.Millisecond, MaxBackoff: 2 * time.Second, ResyncPeriod: time.Hour})
		e.plugin.failTearDowns.Store(2)
		e.m.MarkSourcesReady()
		e.m.AddPod(pod("p", "cache"))
		if err := e.m.WaitForMount(waitCtx(t, 10*time.Second), "p"); err != nil {
			t.Fatal(err)
		}
		e.m.RemovePod("p")
		// synctest.Wait returns once everything the step started has run:
		// the count is exact, never a guess after a sleep.
		waitFor := func(n int32) {
			t.Helper()
			synctest.Wait()
			if got := e.plugin.tearDowns.Load(); got != n {
				t.Fatalf("TearDown ran %d times; want %d", got, n)
			}
		}
		stayAt := func(n int32) {
			t.Helper()
			e.m.AddPod(pod("other", "x")) // wake the loop: it must still not retry
			synctest.Wait()
			if got := e.plugin.tearDowns.Load(); got != n {
				t.Fatalf("TearDown ran %d times before the backoff expired; want %d", got, n)
			}
		}
		waitFor(1)
		stayAt(1)
		c.Step(499 * time.Millisecond)
		stayAt(1)
		c.Step(2 * time.Millisecond) // past 500ms: first retry (fails again)
		waitFor(2)
		c.Step(900 * time.Millisecond)
		stayAt(2)
		c.Step(200 * time.Millisecond) // past 1s: second retry succeeds
		waitFor(3)
		if err := e.m.WaitForUnmount(waitCtx(t, 5*time.Second), "p"); err != nil {
			t.Fatal(err)
		}
	})
}
