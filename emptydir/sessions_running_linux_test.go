package emptydir

import (
	"path/filepath"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestSessionsOfARunningProcess: a process that starts while another
// runs on the same root (a restart where the old one still beats, two
// plugins in one process) takes the other's session as lasting until its
// own start, not as ending at the other's last heartbeat: a tmpfs planted
// in between was made while a nodevol process ran.
func TestSessionsOfARunningProcess(t *testing.T) {
	mounttest.RequireMounts(t)
	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	root := t.TempDir()
	mounttest.Build(t, root, "dir planted")
	first := startSessions(root, logger)
	if first.err != nil {
		t.Fatal(first.err)
	}
	// Before the first process's next heartbeat:
	mounttest.Tmpfs(t, filepath.Join(root, "planted"), "size=64k")
	planted := uniqueMountID(t, filepath.Join(root, "planted"))
	second := startSessions(root, logger)
	if second.err != nil {
		t.Fatal(second.err)
	}
	if ok, _ := second.beforeNodevol(planted); ok {
		t.Errorf("a tmpfs planted while another nodevol process ran, after its last heartbeat, counts as made while none ran (log %+v)", readSessions(t, root))
	}
	// Once the first has stopped, the next process sees the same.
	if err := first.heartbeat(); err != nil {
		t.Fatal(err)
	}
	kill(first)
	third := startSessions(root, logger)
	if ok, _ := third.beforeNodevol(planted); ok {
		t.Errorf("after both: counts as made while none ran (log %+v)", readSessions(t, root))
	}
}
