package cli

import (
	"errors"
	"log/slog"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
)

// goMemoryReserve is the part of a container's memory limit kept outside the Go
// runtime's soft limit. The container's memory counts the pages of the binary mapped
// from its file (about 38 MiB of each process's RSS, docs/performance.md) and what the
// runtime holds beyond its soft limit; the Go limit counts neither. A Go limit equal to
// the container's would let the heap grow into that room.
const goMemoryReserve = 50 << 20

// goMemoryLimit is the Go runtime's soft memory limit in a container limited to limit
// bytes: the limit less goMemoryReserve, and at least half of it.
func goMemoryLimit(limit uint64) uint64 {
	if limit < 2*goMemoryReserve {
		return limit / 2
	}
	return limit - goMemoryReserve
}

// setGoMemoryLimit sets the Go runtime's soft memory limit from the memory limit of the
// process's cgroup (the container's), so that the runtime collects garbage harder as
// the heap nears it instead of the pod being killed. A GOMEMLIMIT in the environment
// is kept as it is (memlimit.Set says so); without a cgroup limit nothing is set.
func setGoMemoryLimit(log logr.Logger) {
	_, err := memlimit.Set(
		memlimit.WithRatio(1),
		memlimit.WithProvider(func() (uint64, error) {
			limit, err := memlimit.FromCgroup()
			if err != nil {
				return 0, err
			}
			return goMemoryLimit(limit), nil
		}),
		memlimit.WithLogger(slog.New(logr.ToSlogHandler(log))),
	)
	if err != nil && !errors.Is(err, memlimit.ErrNoCgroup) && !errors.Is(err, memlimit.ErrCgroupsNotSupported) {
		log.Error(err, "Failed to set the Go memory limit from the container's; the runtime runs without one")
	}
}
