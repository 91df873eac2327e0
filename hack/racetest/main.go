// Command racetest runs go test under the race detector, as make test's race step
// does, and fails as go test fails, with one exception: a package whose failed tests
// failed only on data races that lie wholly inside a package the project cannot change
// (-excuse; govmomi's vCenter simulator, which the test binaries hold and which races
// against itself) has those tests run again, up to -reruns times, and passes if a run
// does. A race with a frame of the project's own code in either access, a failure of
// any other kind, or a race outside a test is never excused.
//
//	go run ./hack/racetest -excuse github.com/vmware/govmomi/simulator -- -count=1 ./...
//
// The arguments after -- go to go test, flags first and in their -name=value form,
// then the packages.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// pkgRun is what one package's run of go test -json printed and how it ended.
type pkgRun struct {
	// lines are every output line, the tests' and the package's, in order.
	lines []string
	// tests are each test's own output lines, by name.
	tests map[string][]string
	// failed are the tests that failed, subtests included.
	failed []string
	// ok says whether the package passed.
	ok bool
}

// options are racetest's own flags and go test's arguments.
type options struct {
	own     string
	excuse  []string
	reruns  int
	flags   []string
	pkgs    []string
	workDir string // where go test runs; the current directory when empty
}

func main() {
	var o options
	flag.StringVar(&o.own, "own", "", "The project's module path; what go list -m says when empty")
	flag.Func("excuse", "A package path whose races among its own frames are not the project's (repeatable)", func(p string) error {
		o.excuse = append(o.excuse, p)
		return nil
	})
	flag.IntVar(&o.reruns, "reruns", 2, "How many times a test that failed only on an excused race runs again")
	flag.Parse()
	for _, a := range flag.Args() {
		if strings.HasPrefix(a, "-") {
			o.flags = append(o.flags, a)
		} else {
			o.pkgs = append(o.pkgs, a)
		}
	}
	ctx := context.Background()
	if o.own == "" {
		out, err := exec.CommandContext(ctx, "go", "list", "-m").Output()
		if err != nil {
			fmt.Fprintf(os.Stderr, "racetest: failed to read the module's path: %v\n", err)
			os.Exit(2)
		}
		o.own = strings.TrimSpace(string(out))
	}
	if err := run(ctx, o, log.New(os.Stdout, "", 0)); err != nil {
		fmt.Fprintf(os.Stderr, "racetest: %v\n", err)
		os.Exit(1)
	}
}

// run runs the packages' tests under the race detector and returns an error unless
// every package passed, at once or when its tests that failed only on excused races
// ran again.
func run(ctx context.Context, o options, out *log.Logger) error {
	runs, passed, err := goTest(ctx, o, o.flags, o.pkgs, out)
	if err != nil {
		return err
	}
	if passed {
		return nil
	}
	var failed, excused []string
	for _, pkg := range slices.Sorted(maps.Keys(runs)) {
		switch r := runs[pkg]; {
		case r.ok:
		case rerun(ctx, o, pkg, r, out):
			excused = append(excused, pkg)
		default:
			failed = append(failed, pkg)
		}
	}
	switch {
	case len(failed) > 0:
		return fmt.Errorf("%d packages failed under the race detector: %s", len(failed), strings.Join(failed, " "))
	case len(excused) == 0:
		return errors.New("go test failed, and no package's tests did: see its output above")
	}
	return nil
}

// rerun runs again, up to o.reruns times, the tests of a failed package that failed
// only on excused races, and says whether one run passed.
func rerun(ctx context.Context, o options, pkg string, r *pkgRun, out *log.Logger) bool {
	for attempt := 1; ; attempt++ {
		tests, why := excusable(o, r)
		if tests == nil {
			out.Printf("racetest: %s failed: %s\n", pkg, why)
			return false
		}
		if attempt > o.reruns {
			out.Printf("racetest: %s failed on races inside %s in each of %d runs\n", pkg, strings.Join(o.excuse, ", "), attempt)
			return false
		}
		out.Printf("racetest: %s failed only on races inside %s (%s); running them again (%d of %d)\n",
			pkg, strings.Join(o.excuse, ", "), strings.Join(tests, ", "), attempt, o.reruns)
		flags := append(slices.Clone(o.flags), "-run=^("+strings.Join(quoteAll(tests), "|")+")$")
		runs, _, err := goTest(ctx, o, flags, []string{pkg}, out)
		if err != nil {
			out.Printf("racetest: %v\n", err)
			return false
		}
		again, ok := runs[pkg]
		if !ok {
			out.Printf("racetest: %s ran no test when run again\n", pkg)
			return false
		}
		if again.ok {
			out.Printf("racetest: %s passed when run again: the races were %s's alone\n", pkg, strings.Join(o.excuse, ", "))
			return true
		}
		r = again
	}
}

// excusable returns the top-level tests of a failed package to run again, or nil and
// why not: every failed test must have failed on a race, the package must have failed
// on nothing else, and every race must be excused.
func excusable(o options, r *pkgRun) ([]string, string) {
	if len(r.failed) == 0 {
		return nil, "no test failed: the package itself did (a build error, a panic, a race outside a test, a timeout)"
	}
	for _, line := range r.lines {
		if strings.HasPrefix(line, "panic: ") || strings.Contains(line, "test timed out after") {
			return nil, "a test panicked or timed out"
		}
	}
	reports := readReports(r.lines)
	if len(reports) == 0 {
		return nil, "its tests failed without a race"
	}
	for _, rep := range reports {
		if !rep.excused(o.own, o.excuse) {
			return nil, "a race has " + o.own + "'s code in it, or lies outside the excused packages"
		}
	}
	// A parent fails with its subtest, so a failed test is accounted for when it or one
	// of its subtests reported a race; any other failed for a reason of its own.
	var raced []string
	for _, t := range r.failed {
		if slices.ContainsFunc(r.tests[t], func(l string) bool { return strings.Contains(l, raceInTest) }) {
			raced = append(raced, t)
		}
	}
	var top []string
	for _, t := range r.failed {
		if !slices.ContainsFunc(raced, func(s string) bool { return s == t || strings.HasPrefix(s, t+"/") }) {
			return nil, "test " + t + " failed without a race"
		}
		top = append(top, strings.SplitN(t, "/", 2)[0])
	}
	slices.Sort(top)
	return slices.Compact(top), ""
}

// goTest runs go test -json -race with flags on pkgs, prints what go test would print
// (each package's result, and the output of the tests that failed) and returns each
// package's run and whether go test passed. go test failing is not an error here; not
// being able to run it is.
func goTest(ctx context.Context, o options, flags, pkgs []string, out *log.Logger) (map[string]*pkgRun, bool, error) {
	args := append(append([]string{"test", "-json", "-race"}, flags...), pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...) //nolint:gosec // go test with the caller's own arguments
	cmd.Dir = o.workDir
	cmd.Stderr = out.Writer()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, false, err
	}
	if err := cmd.Start(); err != nil {
		return nil, false, fmt.Errorf("failed to start go test: %w", err)
	}
	runs := map[string]*pkgRun{}
	scanner := bufio.NewScanner(stdout)
	scanner.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for scanner.Scan() {
		var e event
		switch err := json.Unmarshal(scanner.Bytes(), &e); {
		case err != nil:
			out.Println(scanner.Text())
			continue
		case e.Package == "":
			// A build's output (Action build-output) is the only event of no package.
			out.Print(e.Output)
			continue
		}
		r := runs[e.Package]
		if r == nil {
			r = &pkgRun{tests: map[string][]string{}}
			runs[e.Package] = r
		}
		record(r, e, out)
	}
	if err := scanner.Err(); err != nil {
		return nil, false, fmt.Errorf("failed to read go test's output: %w", err)
	}
	err = cmd.Wait()
	if ee := (*exec.ExitError)(nil); err != nil && !errors.As(err, &ee) {
		return nil, false, fmt.Errorf("go test: %w", err)
	}
	return runs, err == nil, nil
}

// record adds one event to its package's run and prints what go test would: a failed
// test's output when it fails, and the package's own lines.
func record(r *pkgRun, e event, out *log.Logger) {
	switch e.Action {
	case "output":
		r.lines = append(r.lines, e.Output)
		if e.Test == "" {
			if e.Output != "PASS\n" { // go test prints it only with -v
				out.Print(e.Output)
			}
			return
		}
		r.tests[e.Test] = append(r.tests[e.Test], e.Output)
	case "fail":
		if e.Test == "" {
			return
		}
		r.failed = append(r.failed, e.Test)
		for _, line := range r.tests[e.Test] {
			if !verboseOnly.MatchString(line) {
				out.Print(line)
			}
		}
	case "pass", "skip":
		if e.Test == "" {
			r.ok = true
		}
	}
}

// verboseOnly are the lines go test prints of a test only with -v.
var verboseOnly = regexp.MustCompile(`^=== (RUN|PAUSE|CONT|NAME)\b`)

// quoteAll quotes tests' names for -run.
func quoteAll(tests []string) []string {
	q := make([]string, len(tests))
	for i, t := range tests {
		q[i] = regexp.QuoteMeta(t)
	}
	return q
}
