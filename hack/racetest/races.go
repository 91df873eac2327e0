package main

import (
	"strings"
)

// raceBegin and raceEnd frame each report the race detector prints.
const (
	raceBegin = "WARNING: DATA RACE"
	raceEnd   = "=================="
)

// raceInTest is what package testing reports of a test during which the detector
// found a race, whatever else the test did.
const raceInTest = "race detected during execution of test"

// report is one data race as the detector prints it: the two conflicting accesses,
// each a stack of function names, innermost first. The stacks of the goroutines'
// creation are left out: a goroutine started by banlieue's code may well race only
// inside a library.
type report struct {
	accesses [][]string
}

// readReports finds the race reports among a test binary's output lines.
func readReports(lines []string) []report {
	var reports []report
	var cur *report
	var stack *[]string
	for _, line := range lines {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, raceBegin):
			reports = append(reports, report{})
			cur, stack = &reports[len(reports)-1], nil
		case cur == nil:
		case strings.HasPrefix(line, raceEnd):
			cur, stack = nil, nil
		case isAccess(line):
			cur.accesses = append(cur.accesses, nil)
			stack = &cur.accesses[len(cur.accesses)-1]
		case strings.HasPrefix(line, "Goroutine ") || line == "":
			// A creation stack, or the blank line that ends a stack.
			stack = nil
		case stack != nil && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "    "):
			// "  pkg.Func()": a frame's function; its file follows, indented further.
			*stack = append(*stack, strings.TrimSpace(line))
		}
	}
	return reports
}

// isAccess says whether line starts one of a report's accesses: "Read at 0x… by
// goroutine 7:", "Previous write at 0x… by main goroutine:", "Atomic read at …".
func isAccess(line string) bool {
	line = strings.ToLower(strings.TrimPrefix(line, "Previous "))
	line = strings.TrimPrefix(line, "atomic ")
	return strings.HasPrefix(line, "read at ") || strings.HasPrefix(line, "write at ")
}

// excused says whether the race lies wholly inside a package the project cannot change:
// every access has a frame in one of the excused packages and none in the project's own
// module. A race with one frame of the project's code in either access is the
// project's, and is never excused.
func (r report) excused(own string, excuse []string) bool {
	if len(r.accesses) == 0 || len(excuse) == 0 {
		return false
	}
	for _, stack := range r.accesses {
		inExcused := false
		for _, frame := range stack {
			if inPackage(frame, own) {
				return false
			}
			for _, p := range excuse {
				inExcused = inExcused || inPackage(frame, p)
			}
		}
		if !inExcused {
			return false
		}
	}
	return true
}

// inPackage says whether a frame's function ("pkg/path.(*T).M()", "pkg/path.F.func1()")
// belongs to the package path pkg or to one below it.
func inPackage(frame, pkg string) bool {
	rest, ok := strings.CutPrefix(frame, pkg)
	return ok && (strings.HasPrefix(rest, ".") || strings.HasPrefix(rest, "/"))
}
