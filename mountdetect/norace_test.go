//go:build !race

package mountdetect

const raceEnabled = false
