package libvirt

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
)

// testDriverPool is the pool test:///default starts with.
const testDriverPool = "default-pool"

// TestTestDriverLifecycle runs the power transitions on libvirt's test driver, which is
// fast but keeps state per connection: everything happens on the session's own.
func TestTestDriverLifecycle(t *testing.T) {
	d := daemon(t)
	ctx := t.Context()
	s := connect(t, d.TestURI(), map[string]string{ParamPool: testDriverPool, ParamFailureDomain: "lab"})
	// On the session's own connection: the test driver's state is per connection.
	if err := s.host.CreateVolume(ctx, host.VolumeSpec{
		Volume: host.VolumeRef{Pool: testDriverPool, Name: testImage}, Format: "qcow2", Capacity: testImageGiB * providersdk.GiB,
	}); err != nil {
		t.Fatal(err)
	}
	m := machine("fast", func(m *providersdk.Machine) {
		m.Spec.Image.ResolvedRef = testDriverPool + "/" + testImage
		m.Spec.Disks[0].Target = nil
		m.Spec.Interfaces = nil
	})
	tests := []struct {
		name string
		want banlieuev1.PowerState
	}{
		{name: "created and started", want: banlieuev1.PowerStatePoweredOn},
		{name: "powered off", want: banlieuev1.PowerStatePoweredOff},
		{name: "powered on again", want: banlieuev1.PowerStatePoweredOn},
		{name: "suspended to disk", want: banlieuev1.PowerStateSuspended},
		{name: "resumed", want: banlieuev1.PowerStatePoweredOn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m.Spec.PowerState = tt.want
			if err := createMachine(ctx, s, m); err != nil {
				t.Fatal(err)
			}
			// The test driver stops a domain at once on shutdown; Update is called again
			// as the reconciler would while the shutdown task runs.
			for i := 0; i < 3 && !mustObserve(t, s, m).UpToDate; i++ {
				res, err := updateMachine(ctx, s, m)
				if err != nil {
					t.Fatal(err)
				}
				m.Task = res.Task
			}
			m.Task = providersdk.Task{}
			o := mustObserve(t, s, m)
			got := struct {
				Power         banlieuev1.PowerState
				UpToDate      bool
				FailureDomain string
			}{o.PowerState, o.UpToDate, o.FailureDomain}
			want := got
			want.Power, want.UpToDate, want.FailureDomain = tt.want, true, "lab"
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if err := deleteMachine(ctx, s, m); err != nil {
		t.Fatal(err)
	}
	if o := mustObserve(t, s, m); o.Exists {
		t.Error("the domain survived its deletion")
	}
}
