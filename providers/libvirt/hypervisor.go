package libvirt

import (
	"context"
	"errors"

	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
)

// TCG is the domain type of emulated domains: QEMU without a hypervisor.
const TCG = "qemu"

// start starts dom. libvirt may offer KVM that QEMU then cannot use: on a stock host
// /dev/kvm is often 0600 root while QEMU runs as libvirt-qemu. When the Provider chose
// no domainType, such a domain is redefined to run under TCG (same name, UUID and
// devices) and started again, and the session remembers the refusal, so later domains
// are defined for TCG at once and the inventory says why. A Provider that asked for kvm
// gets QEMU's own words in the machine's condition instead.
func (s *session) start(ctx context.Context, dom *host.Domain) error {
	if err := s.startDomain(ctx, dom); err != nil {
		return err
	}
	// The new boot gets its ID at once, so that the domain just started is up to date.
	// Should this fail, Observe finds the boot without one and Update marks it.
	_, err := s.host.MarkBoot(ctx, dom)
	return err
}

// startDomain starts dom, as start does, without marking its boot.
func (s *session) startDomain(ctx context.Context, dom *host.Domain) error {
	err := s.host.Start(ctx, dom)
	var refused *host.KVMRefusedError
	if !errors.As(err, &refused) {
		return err
	}
	if s.params[ParamDomainType] != "" {
		return providersdk.Retryable(infrav1.MachineHypervisorUnavailableReason,
			"QEMU cannot run domain %s on KVM: %q; give QEMU's user access to /dev/kvm on the host, "+
				"or set the Provider's parameter domainType to qemu (TCG, emulated) or leave it unset to fall back", dom.Name, refused.QEMU)
	}
	ctrl.LoggerFrom(ctx).Info("QEMU cannot use KVM on this host; the domain runs under TCG", "domain", dom.Name, "qemu", refused.QEMU)
	s.kvmRefused(refused.QEMU)
	if err := s.host.SetType(ctx, dom, TCG); err != nil {
		return err
	}
	return s.host.Start(ctx, dom)
}

// kvmRefused records that QEMU refused KVM on the session's host, saying qemu: new
// domains are defined for TCG.
func (s *session) kvmRefused(qemu string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.info == nil {
		return // read again, with the refusal, by the next hostInfo
	}
	h := *s.info
	h.domainType, h.kvmRefused = TCG, qemu
	s.info = &h
}
