package fsat

// SlowWalk turns off the one-call openat2 path of OpenDir, for the tests
// that run every case both ways.
const SlowWalk = slowWalk

// ProcFd is the /proc/self/fd descriptor d's tree reopens files through:
// -1 while it is not open, -2 once closed, -3 for a Dir without a tree.
func ProcFd(d *Dir) int {
	if d.proc == nil {
		return -3
	}
	return int(d.proc.fd.Load())
}
