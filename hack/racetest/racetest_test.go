package main

import (
	"cmp"
	"context"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	banlieue = "github.com/banlieue/banlieue"
	vcsim    = "github.com/vmware/govmomi/simulator"
)

// TestOnlyARaceWhollyInsideAnExcusedPackageIsExcused reads two races the race step
// found: one inside govmomi's simulator (CI, 2026-12-07), one in banlieue's libvirt
// client (CI, 2026-12-06; fixed since).
func TestOnlyARaceWhollyInsideAnExcusedPackageIsExcused(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		excuse  []string
		excused bool
	}{
		{"a race between two of vcsim's goroutines, vcsim excused", "vcsim-race.txt", []string{vcsim}, true},
		{"the same race, nothing excused", "vcsim-race.txt", nil, false},
		{"the same race, another package excused", "vcsim-race.txt", []string{"sigs.k8s.io/controller-runtime"}, false},
		{"a race in banlieue's code, vcsim excused", "libvirt-race.txt", []string{vcsim}, false},
		{"a race in banlieue's code reached through an excused package", "libvirt-race.txt", []string{"sigs.k8s.io/controller-runtime"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			reports := readReports(strings.SplitAfter(string(data), "\n"))
			if len(reports) != 1 || len(reports[0].accesses) != 2 {
				t.Fatalf("read %+v, want one report of two accesses", reports)
			}
			for i, stack := range reports[0].accesses {
				if len(stack) == 0 || strings.HasPrefix(stack[0], "/") {
					t.Errorf("access %d's stack = %q, want function names", i, stack)
				}
			}
			if got := reports[0].excused(banlieue, tt.excuse); got != tt.excused {
				t.Errorf("excused = %v, want %v", got, tt.excused)
			}
		})
	}
}

// TestOnlyTestsThatFailedOnExcusedRacesRunAgain runs go test -race on a small module
// (testdata/racy) whose package third stands for a library, own for the project's code,
// and whose tests race or fail as RACY_CASE says; RACY_STATE makes a race happen on the
// first run only.
func TestOnlyTestsThatFailedOnExcusedRacesRunAgain(t *testing.T) {
	tests := []struct {
		name  string
		race  string
		pass  bool
		reran bool
		pkg   string
	}{
		{"no race", "", true, false, ""},
		{"a race inside the library, on the first run only", "once", true, true, ""},
		{"a race inside the library, on every run", "always", false, true, ""},
		{"a race in the project's own code, on the first run only", "own", false, false, ""},
		// A test's failures and its logs read alike, so the test runs again, and fails.
		{"a failure of the test's own beside a race inside the library", "fails", false, true, ""},
		{"a package go test cannot find", "", false, false, "./nosuch/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("RACY_CASE", tt.race)
			t.Setenv("RACY_STATE", t.TempDir())
			t.Setenv("GOWORK", "off")
			t.Setenv("GOFLAGS", "")
			var out strings.Builder
			err := run(context.Background(), options{
				own: "example.com/racy/own", excuse: []string{"example.com/racy/third"}, reruns: 2,
				flags: []string{"-count=1"}, pkgs: []string{cmp.Or(tt.pkg, "./suite/")},
				workDir: filepath.Join("testdata", "racy"),
			}, log.New(&out, "", 0))
			if passed := err == nil; passed != tt.pass {
				t.Errorf("passed = %v (%v), want %v; output:\n%s", passed, err, tt.pass, out.String())
			}
			if reran := strings.Contains(out.String(), "running them again"); reran != tt.reran {
				t.Errorf("ran again = %v, want %v; output:\n%s", reran, tt.reran, out.String())
			}
		})
	}
}
