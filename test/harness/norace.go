//go:build !race

package harness

// raceEnabled is true when this package was built for the race detector.
const raceEnabled = false
