package providersdk_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

func TestObservedHardwareRoundsDisksUpToWholeGiB(t *testing.T) {
	for _, tc := range []struct {
		name string
		hw   providersdk.Hardware
		want banlieuev1.ObservedHardware
	}{
		{name: "whole GiB stay as they are", hw: providersdk.Hardware{CPUs: 2, MemoryMiB: 2048, DiskBytes: []int64{10 * providersdk.GiB}},
			want: banlieuev1.ObservedHardware{CPUs: 2, MemoryMiB: 2048, DiskSizesGiB: []int64{10}}},
		{name: "a byte over is the next GiB", hw: providersdk.Hardware{CPUs: 1, MemoryMiB: 128, DiskBytes: []int64{providersdk.GiB + 1, 512 << 20}},
			want: banlieuev1.ObservedHardware{CPUs: 1, MemoryMiB: 128, DiskSizesGiB: []int64{2, 1}}},
		{name: "an unknown size stays 0", hw: providersdk.Hardware{CPUs: 4, MemoryMiB: 4096, DiskBytes: []int64{0, 3 * providersdk.GiB}},
			want: banlieuev1.ObservedHardware{CPUs: 4, MemoryMiB: 4096, DiskSizesGiB: []int64{0, 3}}},
		{name: "no disks, none reported", hw: providersdk.Hardware{CPUs: 1, MemoryMiB: 256},
			want: banlieuev1.ObservedHardware{CPUs: 1, MemoryMiB: 256}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.hw.Observed()); diff != "" {
				t.Errorf("Observed() (-want +got):\n%s", diff)
			}
		})
	}
}
