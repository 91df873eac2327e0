package proxmoxsim

import (
	"fmt"
	"regexp"
	"strconv"
)

// UPID is the parsed form of a PVE task identifier,
// UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>: with pid, pstart and
// starttime in upper-case hex. Clients read the node to poll from it, so its syntax
// must be exactly PVE's.
type UPID struct {
	// Node is the node the task runs on.
	Node string
	// PID and PStart identify the worker process; PStart is its start time in clock
	// ticks since boot, which PVE compares to tell a live worker from a reused PID.
	PID, PStart uint64
	// StartTime is the task's start in seconds since the Unix epoch.
	StartTime int64
	// Type is the task type, e.g. qmclone, qmstart, imgcopy.
	Type string
	// ID is the object the task works on, usually a VMID; it may be empty.
	ID string
	// User is the user, or user!token, that started the task.
	User string
}

// upidPattern is PVE::Tools::upid_decode's: node names are host names, pstart may
// have nine digits (twenty years of uptime), the ID may be empty and the UPID ends in
// a colon.
var upidPattern = regexp.MustCompile(`^UPID:([a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s]+):([^:\s]*):([^:\s]+):$`)

// ParseUPID parses a UPID string the way PVE does and rejects what PVE rejects.
func ParseUPID(s string) (UPID, error) {
	m := upidPattern.FindStringSubmatch(s)
	if m == nil {
		return UPID{}, fmt.Errorf("unable to parse worker upid '%s'", s)
	}
	// The pattern bounds every number to nine hex digits, so these cannot fail.
	pid, _ := strconv.ParseUint(m[2], 16, 64)
	pstart, _ := strconv.ParseUint(m[3], 16, 64)
	start, _ := strconv.ParseInt(m[4], 16, 64)
	return UPID{Node: m[1], PID: pid, PStart: pstart, StartTime: start, Type: m[5], ID: m[6], User: m[7]}, nil
}

// String formats u as PVE does, with eight upper-case hex digits for each number
// (more when a value needs them).
func (u UPID) String() string {
	return fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", u.Node, u.PID, u.PStart, u.StartTime, u.Type, u.ID, u.User)
}
