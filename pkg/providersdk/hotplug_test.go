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
