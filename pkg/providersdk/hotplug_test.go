package providersdk_test

import (
	"testing"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

func TestHotplugFromReadsTheProvidersParameter(t *testing.T) {
	for _, tt := range []struct {
		name    string
		params  map[string]string
		want    providersdk.Hotplug
		wantErr string
	}{
		{name: "unset: nothing grows while the VM runs", params: nil},
		{name: "empty: the same", params: map[string]string{"hotplug": " "}},
		{name: "CPUs only", params: map[string]string{"hotplug": "cpu"}, want: providersdk.Hotplug{CPU: true}},
		{name: "both, in any order, case and spacing", params: map[string]string{"hotplug": " Memory , cpu"}, want: providersdk.Hotplug{CPU: true, Memory: true}},
		{name: "anything else is refused, saying what to write", params: map[string]string{"hotplug": "cpu,disk"},
			wantErr: `parameters.hotplug "cpu,disk": "disk" is neither cpu nor memory; list what may grow while a VM runs, e.g. cpu,memory, in the Provider`},
		{name: "the maxima", params: map[string]string{"hotplug": "cpu,memory", "maxCPUs": "16", "maxMemoryMiB": " 65536 "},
			want: providersdk.Hotplug{CPU: true, Memory: true, MaxCPUs: 16, MaxMemoryMiB: 65536}},
		{name: "a maximum that is no count is refused", params: map[string]string{"maxCPUs": "8 cores"},
			wantErr: `parameters.maxCPUs "8 cores" is not a whole number from 1 to 1024; set it in the Provider, or remove it for the default`},
		{name: "so is zero", params: map[string]string{"maxMemoryMiB": "0"},
			wantErr: `parameters.maxMemoryMiB "0" is not a whole number from 1 to 1073741824; set it in the Provider, or remove it for the default`},
		{name: "and what would overflow", params: map[string]string{"maxCPUs": "4294967297"},
			wantErr: `parameters.maxCPUs "4294967297" is not a whole number from 1 to 1024; set it in the Provider, or remove it for the default`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := providersdk.HotplugFrom(tt.params)
			switch {
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case got != tt.want:
				t.Errorf("HotplugFrom = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestHotplugLimitsAreTheHeadroomAVMIsCreatedWith(t *testing.T) {
	for _, tt := range []struct {
		name          string
		hotplug       providersdk.Hotplug
		cpus          int32
		memoryMiB     int64
		wantCPUs      int32
		wantMemoryMiB int64
	}{
		{name: "no hotplug: no headroom", cpus: 2, memoryMiB: 2048, wantCPUs: 2, wantMemoryMiB: 2048},
		{name: "the bounds are ignored without hotplug", hotplug: providersdk.Hotplug{MaxCPUs: 8, MaxMemoryMiB: 8192},
			cpus: 2, memoryMiB: 2048, wantCPUs: 2, wantMemoryMiB: 2048},
		{name: "default: four times, as KubeVirt", hotplug: providersdk.Hotplug{CPU: true, Memory: true},
			cpus: 2, memoryMiB: 2048, wantCPUs: 8, wantMemoryMiB: 8192},
		{name: "default CPUs are capped", hotplug: providersdk.Hotplug{CPU: true}, cpus: 32, memoryMiB: 1024, wantCPUs: 64, wantMemoryMiB: 1024},
		{name: "but never below what the VM has", hotplug: providersdk.Hotplug{CPU: true}, cpus: 96, memoryMiB: 1024, wantCPUs: 96, wantMemoryMiB: 1024},
		{name: "the Provider's bounds", hotplug: providersdk.Hotplug{CPU: true, Memory: true, MaxCPUs: 6, MaxMemoryMiB: 3072},
			cpus: 2, memoryMiB: 2048, wantCPUs: 6, wantMemoryMiB: 3072},
		{name: "a bound below the VM is the VM", hotplug: providersdk.Hotplug{CPU: true, Memory: true, MaxCPUs: 1, MaxMemoryMiB: 512},
			cpus: 2, memoryMiB: 2048, wantCPUs: 2, wantMemoryMiB: 2048},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cpus, mem := tt.hotplug.Limits(tt.cpus, tt.memoryMiB)
			if cpus != tt.wantCPUs || mem != tt.wantMemoryMiB {
				t.Errorf("Limits(%d, %d) = %d, %d; want %d, %d", tt.cpus, tt.memoryMiB, cpus, mem, tt.wantCPUs, tt.wantMemoryMiB)
			}
		})
	}
}
