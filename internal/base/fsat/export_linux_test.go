package fsat

// SlowWalk turns off the one-call openat2 path of OpenDir, for the tests
// that run every case both ways.
const SlowWalk = slowWalk
