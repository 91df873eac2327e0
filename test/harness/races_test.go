package harness_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/banlieue/banlieue/test/harness"
	"github.com/banlieue/banlieue/test/testenv"
)

// A process built for the race detector writes its reports to its log, where Races
// finds them: a program whose two goroutines write one counter unlocked is reported,
// the same program with the lock is not.
func TestRacesAreReadFromTheProcessLog(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "racy")
	build := exec.Command("go", "build", "-race", "-o", bin, "./test/harness/testdata/racy")
	build.Dir = testenv.RepoPath(".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("failed to build the racy program: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		mode string
		want bool
	}{
		{mode: "racy", want: true},
		{mode: "locked", want: false},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			p, err := harness.Start(bin, dir, tc.mode, tc.mode)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Kill() })
			deadline := time.Now().Add(time.Minute)
			for p.Running() && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if p.Running() {
				t.Fatal("the program did not end within a minute")
			}
			races, err := p.Races()
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(races, "WARNING: DATA RACE") && strings.Contains(races, "main.main"); got != tc.want {
				t.Errorf("Races() = %q; want a report of main.main's race: %t", races, tc.want)
			}
		})
	}
}
