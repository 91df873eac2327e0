package suite

import (
	"os"
	"path/filepath"
	"testing"

	"example.com/racy/own"
	"example.com/racy/third"
)

// firstRun says whether this is the first run of name in the directory RACY_STATE
// names, and marks it run.
func firstRun(t *testing.T, name string) bool {
	marker := filepath.Join(os.Getenv("RACY_STATE"), name)
	if _, err := os.Stat(marker); err == nil {
		return false
	}
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return true
}

// TestThirdPartyRacesOnce races inside the library on its first run only.
func TestThirdPartyRacesOnce(t *testing.T) {
	if os.Getenv("RACY_CASE") != "once" {
		t.Skip()
	}
	t.Run("sub", func(t *testing.T) {
		if firstRun(t, "once") {
			third.Race()
		}
	})
}

// TestThirdPartyRacesAlways races inside the library on every run.
func TestThirdPartyRacesAlways(t *testing.T) {
	if os.Getenv("RACY_CASE") != "always" {
		t.Skip()
	}
	third.Race()
}

// TestOwnRace races in the project's own code, on its first run only.
func TestOwnRace(t *testing.T) {
	if os.Getenv("RACY_CASE") != "own" {
		t.Skip()
	}
	if firstRun(t, "own") {
		own.Race()
	}
}

// TestFailsAndRaces fails on every run, and races inside the library on its first.
func TestFailsAndRaces(t *testing.T) {
	if os.Getenv("RACY_CASE") != "fails" {
		t.Skip()
	}
	if firstRun(t, "fails") {
		third.Race()
	}
	t.Error("a failure of the test's own")
}

// TestPasses passes.
func TestPasses(t *testing.T) {}
