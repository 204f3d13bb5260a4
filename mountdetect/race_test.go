//go:build race

package mountdetect

// raceEnabled: the race detector is on. It makes sync.Pool drop a share of
// what is put back, so a walk may allocate a listing buffer the pool would
// otherwise have held.
const raceEnabled = true
