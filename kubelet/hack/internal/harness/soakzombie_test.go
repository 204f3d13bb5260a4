package harness

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestProcessZombie: a child that exited and is not yet waited for is a
// zombie; a running process (this one) is not; a missing one is not.
func TestProcessZombie(t *testing.T) {
	if processZombie(strconv.Itoa(os.Getpid())) {
		t.Errorf("this running process reads as a zombie")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	deadline := time.Now().Add(10 * time.Second)
	for !processZombie(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %s exited without being waited for, but never read as a zombie", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if processZombie(pid) {
		t.Errorf("process %s still reads as a zombie once reaped", pid)
	}
}
