package host

import (
	"context"
	"errors"
	"strings"

	"github.com/digitalocean/go-libvirt"
)

// Start starts d, restoring its managed save image when it has one. When QEMU cannot
// use KVM for it, the error is a *KVMRefusedError.
func (c *Client) Start(ctx context.Context, d *Domain) error {
	err := c.do(ctx, "StartDomain", "start domain "+d.Name, func(l *libvirt.Libvirt) error {
		return l.DomainCreate(d.ref)
	})
	if refused := kvmRefused(err); refused != nil {
		return refused
	}
	return err
}

// Resume resumes d's paused CPUs.
func (c *Client) Resume(ctx context.Context, d *Domain) error {
	return c.do(ctx, "ResumeDomain", "resume domain "+d.Name, func(l *libvirt.Libvirt) error {
		return l.DomainResume(d.ref)
	})
}

// Wakeup wakes d's guest from a suspend it made itself (ACPI S3).
func (c *Client) Wakeup(ctx context.Context, d *Domain) error {
	return c.do(ctx, "WakeupDomain", "wake domain "+d.Name+" up", func(l *libvirt.Libvirt) error {
		return l.DomainPmWakeup(d.ref, 0)
	})
}

// ManagedSave saves d's memory to disk and stops it; its next start restores it.
func (c *Client) ManagedSave(ctx context.Context, d *Domain) error {
	return c.do(ctx, "SaveDomain", "save domain "+d.Name+" to disk", func(l *libvirt.Libvirt) error {
		return l.DomainManagedSave(d.ref, 0)
	})
}

// RemoveManagedSave discards d's managed save image, so that it next boots afresh.
func (c *Client) RemoveManagedSave(ctx context.Context, d *Domain) error {
	return c.do(ctx, "RemoveSavedDomain", "discard the saved memory of domain "+d.Name, func(l *libvirt.Libvirt) error {
		return l.DomainManagedSaveRemove(d.ref, 0)
	})
}

// Shutdown presses d's ACPI power button; the guest decides whether to stop. The mode
// is named: by default libvirt asks the guest agent first when the domain has its
// channel, and an agent that is wedged, or a guest whose agent is gone, answers
// differently from the guest's own power button handling.
func (c *Client) Shutdown(ctx context.Context, d *Domain) error {
	return c.do(ctx, "ShutdownDomain", "shut domain "+d.Name+" down", func(l *libvirt.Libvirt) error {
		err := l.DomainShutdownFlags(d.ref, libvirt.DomainShutdownAcpiPowerBtn)
		if !isUnsupportedFlags(err) {
			return err
		}
		// A driver without shutdown modes (libvirt's test driver) has one way only.
		return l.DomainShutdownFlags(d.ref, 0)
	})
}

// Destroy stops d at once, as pulling its plug would. A domain that is not running,
// or gone, is no error.
func (c *Client) Destroy(ctx context.Context, d *Domain) error {
	return c.do(ctx, "DestroyDomain", "destroy domain "+d.Name, func(l *libvirt.Libvirt) error {
		return destroy(l, d)
	})
}

// destroy stops d, ignoring that it is not running or gone.
func destroy(l *libvirt.Libvirt, d *Domain) error {
	err := l.DomainDestroyFlags(d.ref, 0)
	if isCode(err, libvirt.ErrOperationInvalid, libvirt.ErrNoDomain) {
		return nil // it stopped, or went, meanwhile
	}
	return err
}

// Remove destroys d when it runs and undefines it with its managed save image and its
// NVRAM. A domain already gone is no error.
func (c *Client) Remove(ctx context.Context, d *Domain) error {
	return c.do(ctx, "DeleteDomain", "delete domain "+d.Name, func(l *libvirt.Libvirt) error {
		if d.State != StateShutoff && d.State != StateCrashed {
			if err := destroy(l, d); err != nil {
				return err
			}
		}
		var flags libvirt.DomainUndefineFlagsValues
		if d.ManagedSave {
			flags |= libvirt.DomainUndefineManagedSave
		}
		if d.NVRAM {
			flags |= libvirt.DomainUndefineNvram
		}
		if err := l.DomainUndefineFlags(d.ref, flags); err != nil && !isCode(err, libvirt.ErrNoDomain) {
			return err
		}
		return nil
	})
}

// isUnsupportedFlags reports whether libvirt refused a call's flags (VIR_ERR_INVALID_ARG
// "unsupported flags"), as drivers do for modes they do not have.
func isUnsupportedFlags(err error) bool {
	var lerr libvirt.Error
	return errors.As(err, &lerr) && lerr.Code == uint32(libvirt.ErrInvalidArg) && strings.Contains(lerr.Message, "unsupported flags")
}
