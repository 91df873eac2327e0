package cli

import "testing"

func TestGoMemoryLimitLeavesRoomForWhatGoDoesNotCount(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		container, want uint64
	}{
		{container: 150 * mib, want: 100 * mib},
		{container: 512 * mib, want: 462 * mib},
		{container: 100 * mib, want: 50 * mib},
		// A container too small for the reserve gives Go half of it, not nothing.
		{container: 64 * mib, want: 32 * mib},
		{container: 0, want: 0},
	} {
		if got := goMemoryLimit(tc.container); got != tc.want {
			t.Errorf("goMemoryLimit(%d MiB) = %d MiB, want %d MiB", tc.container/mib, got/mib, tc.want/mib)
		}
	}
}
