package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// cliRaceIterations per medium: each iteration sets a volume up and runs
// the built binary once (about 40 ms on two cores with the attacker
// spinning), so the CLI race runs a thousand times in all; the library's
// own race test runs the same teardown code a thousand times per medium.
const cliRaceIterations = 500

// TestTeardownCLISwapRace (issue 10, finding 1, through the built CLI):
// while `nodevol teardown` runs, the volume directory is exchanged again
// and again with a symlink to another tmpfs, by a thread in a mount
// namespace of its own (so it can rename the Memory volume's mount
// point). Whatever the command reports, that tmpfs stays mounted and its
// data byte for byte.
func TestTeardownCLISwapRace(t *testing.T) {
	mounttest.RequireMounts(t)
	bin := buildBinary(t)
	for _, medium := range []volume.StorageMedium{"", volume.StorageMediumMemory} {
		t.Run("medium="+string(medium), func(t *testing.T) {
			base := realTempDir(t)
			victim := filepath.Join(base, "victim")
			mounttest.Tmpfs(t, victim, "size=1m")
			want := mounttest.Sentinels(t, victim)
			k := newKubelet(t, base)
			src := volume.EmptyDirSource{Medium: medium}
			vol := k.setUp(t, testUID, "cache", src)
			vols := filepath.Dir(vol)
			vfd, err := unix.Open(vols, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(vfd)
			swap := filepath.Join(vols, "swap")
			if err := os.Symlink(victim, swap); err != nil {
				t.Fatal(err)
			}
			a := mounttest.StartAttacker(t, func() error { return mounttest.Exchange(vfd, "cache", "swap") })
			codes := map[int]int{}
			raced := 0
			for i := range cliRaceIterations {
				if i > 0 {
					k.setUp(t, testUID, "cache", src)
				}
				before := a.Steps()
				a.Resume()
				r := bin.runQuiet(t, "teardown", vol)
				a.Pause()
				if a.Steps() != before {
					raced++
				}
				codes[r.code]++
				if !mounttest.IsMountRoot(t, victim) {
					t.Fatalf("iteration %d: the victim tmpfs was unmounted (exit %d, stdout %q, stderr %q)", i, r.code, r.stdout, r.stderr)
				}
				mounttest.Intact(t, victim, want)
				if t.Failed() {
					t.Fatalf("iteration %d: the victim's data changed (exit %d, stdout %q, stderr %q)", i, r.code, r.stdout, r.stderr)
				}
				mounttest.RestoreSwap(t, vols, "cache", "swap", victim)
				if err := os.RemoveAll(filepath.Dir(k.ready(t, testUID, "cache"))); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%d runs, %d raced with an exchange; exit codes %v", cliRaceIterations, raced, codes)
			if raced < cliRaceIterations/10 {
				t.Errorf("only %d of %d runs overlapped an exchange: the race was not exercised", raced, cliRaceIterations)
			}
		})
	}
}

// runQuiet runs the binary without logging its output (for the thousands
// of runs of a race test; a failure message quotes the run itself).
func (b binary) runQuiet(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(b.path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.Exited():
		r.code = exit.ExitCode()
	default:
		t.Fatalf("%s %q: %v\nstderr:\n%s", b.path, args, err, r.stderr)
	}
	return r
}
