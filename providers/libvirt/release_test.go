package libvirt

import (
	"testing"

	"github.com/digitalocean/go-libvirt"
	"github.com/google/uuid"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// TestReleaseOfAShutOffDomainKeepsItsDefinitionAndOtherMetadata releases a domain that
// does not run, whose metadata only its definition holds, next to another tool's
// metadata element.
func TestReleaseOfAShutOffDomainKeepsItsDefinitionAndOtherMetadata(t *testing.T) {
	d := daemon(t)
	ctx := t.Context()
	s := connect(t, d.QEMUURI(), nil)
	m := machine("kept-"+uuid.NewString()[:8], func(m *providersdk.Machine) { m.Spec.PowerState = banlieuev1.PowerStatePoweredOff })
	if _, err := s.Create(ctx, m, mustObserve(t, s, m)); err != nil {
		t.Fatalf("create: %v", err)
	}
	const otherNS, other = "https://example.com/inventory", `<asset>rack 4</asset>`
	inspect(t, d, func(l *libvirt.Libvirt) {
		dom, err := l.DomainLookupByUUID(libvirt.UUID(uuid.MustParse(string(m.UID))))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.DomainSetMetadata(dom, int32(libvirt.DomainMetadataElement), libvirt.OptString{other},
			libvirt.OptString{"inv"}, libvirt.OptString{otherNS}, libvirt.DomainAffectConfig); err != nil {
			t.Fatal(err)
		}
	})
	before := mustObserve(t, s, m)
	if !before.Exists || before.PowerState != banlieuev1.PowerStatePoweredOff {
		t.Fatalf("before the release: %+v", before)
	}

	m.Deleting, m.Spec.DeletionPolicy = true, banlieuev1.DeletionPolicyRetain
	obs := mustObserve(t, s, m)
	if _, err := s.Release(ctx, m, obs); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if obs := mustObserve(t, connect(t, d.QEMUURI(), nil), m); obs.Exists {
		t.Errorf("a restarted provider still finds the released domain: %+v", obs)
	}
	// Released again with the observation of the marked domain, as a provider that lost
	// the first call's answer would.
	if _, err := s.Release(ctx, m, obs); err != nil {
		t.Errorf("a second Release: %v", err)
	}
	if err := releasedDomain(t, d, m, before); err != nil {
		t.Error(err)
	}
	inspect(t, d, func(l *libvirt.Libvirt) {
		dom, err := l.DomainLookupByUUID(libvirt.UUID(uuid.MustParse(string(m.UID))))
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.DomainGetMetadata(dom, int32(libvirt.DomainMetadataElement), libvirt.OptString{otherNS}, libvirt.DomainAffectConfig)
		if err != nil || got != other {
			t.Errorf("the other tool's metadata after the release: %q, %v; want %q", got, err, other)
		}
	})

	// A machine that is not being released still refuses the unmarked domain.
	m.Deleting = false
	if _, err := s.Observe(ctx, m); !providersdk.IsPermanent(err) {
		t.Errorf("Observe of the released domain for a live machine: %v, want an IdentityMismatch", err)
	}
}
