package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The demo's own checks must be able to fail: a demo that cannot notice
// lost data would prove nothing.
func TestDemoNoticesBrokenPromises(t *testing.T) {
	d := &demo{out: io.Discard, tmp: t.TempDir()}
	file := filepath.Join(d.tmp, "important.txt")

	if err := d.intact(file, "important.txt"); err == nil || !strings.Contains(err.Error(), "PROMISE BROKEN: the NAS lost") {
		t.Errorf("intact(missing file) = %v; want a broken promise", err)
	}
	if err := os.WriteFile(file, []byte("truncated"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.intact(file, "important.txt"); err == nil || !strings.Contains(err.Error(), "PROMISE BROKEN: important.txt changed") {
		t.Errorf("intact(changed file) = %v; want a broken promise", err)
	}
	if err := os.WriteFile(file, []byte(demoNASData), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.intact(file, "important.txt"); err != nil {
		t.Errorf("intact(unchanged file) = %v; want nil", err)
	}

	if err := d.build(); err != nil {
		t.Fatal(err)
	}
	if err := d.dbIntact(); err == nil || !strings.Contains(err.Error(), "PROMISE BROKEN: db lost data.db") {
		t.Errorf("dbIntact(missing file) = %v; want a broken promise", err)
	}
	if err := writeFiles(d.dbVol(), map[string]string{"data.db": "emptied"}); err != nil {
		t.Fatal(err)
	}
	if err := d.dbIntact(); err == nil || !strings.Contains(err.Error(), "PROMISE BROKEN: db's data.db changed") {
		t.Errorf("dbIntact(changed file) = %v; want a broken promise", err)
	}

	if err := d.step("nodevol rm $VOL", exitRefused, func(io.Writer) int { return exitOK }); err == nil || !strings.Contains(err.Error(), "PROMISE BROKEN") {
		t.Errorf("step exiting 0 where 1 was promised = %v; want a broken promise", err)
	}
	if err := d.step("nodevol rm $VOL", exitOK, func(io.Writer) int { return exitOK }); err != nil {
		t.Errorf("step exiting as promised = %v; want nil", err)
	}
}

// The demo explains the refusal count from its own backoff settings.
func TestDemoAttempts(t *testing.T) {
	for n, want := range map[int]string{
		1: "the first try was refused",
		2: "the first try and 1 retry, after backoffs of 100ms, were all refused",
		5: "the first try and 4 retries, after backoffs of 100ms, 200ms, 400ms, 400ms, were all refused",
	} {
		if got := attempts(n); got != want {
			t.Errorf("attempts(%d) = %q; want %q", n, got, want)
		}
	}
}

func TestCounterValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: refusedMetric, Help: "h"}, []string{"plugin"})
	reg.MustRegister(c)
	c.WithLabelValues("other").Add(7)
	c.WithLabelValues("kubernetes.io/empty-dir").Add(3)
	if got, err := counterValue(reg, refusedMetric, "plugin", "kubernetes.io/empty-dir"); got != 3 || err != nil {
		t.Errorf("counterValue = %v, %v; want 3, nil", got, err)
	}
	if got, err := counterValue(reg, refusedMetric, "plugin", "nosuch"); got != 0 || err != nil {
		t.Errorf("counterValue(no such label) = %v, %v; want 0, nil", got, err)
	}
}
