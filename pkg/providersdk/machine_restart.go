package providersdk

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// A restart request (spec.restartRequestedAt, the token T) is honoured once, by a
// record-first protocol whose state lives in the machine's status.restart, read from
// the API server at the start of every reconcile:
//
//  1. T is taken up by writing status.restart{requestedAt: T, bootID: the VM's current
//     boot, startedAt} before anything is done to the VM, with a write conditional on
//     the resourceVersion read (writeStatus with lock).
//  2. While the VM runs the recorded boot, the Reconciler hands the driver PoweredOff
//     as the desired power (the driver's graceful shutdown, then hard power-off after
//     its shutdown timeout); while the VM is off, the machine's own desired power,
//     PoweredOn.
//  3. Once the VM runs another boot, completedAt and result Restarted are written.
//
// Exactly once: the VM is powered off for T only while T is recorded, not completed,
// and the VM runs the boot recorded with it. Observation.BootID changes on every start,
// so once the VM has started again no state leads back to a power-off for T. A process
// killed at any instruction leaves one of: nothing recorded (nothing was done either:
// start over); T recorded, the VM on the old boot (the shutdown is asked again, which
// is idempotent, and the timeout still ends in a hard power-off); T recorded, the VM
// off (it is powered on); T recorded, the VM on a new boot (step 3, which writes the
// same result again if it is repeated). A backend's own power cycle in between (HA, a
// host crash) counts as the restart.
//
// No action needed: T is recorded as Skipped, before anything else, when the machine's
// desired power is not PoweredOn, and when the VM is about to be created (the VM is
// made after the request). A VM that runs but whose driver reports no BootID cannot be
// restarted exactly once: T is recorded as Unsupported and the VM is left alone, so a
// request never loops.

// restartStep takes the machine's restart request a step further against obs, and
// reports whether the VM must be powered off for it now. It writes status.restart (and
// the rest of the status as computed so far) when it records a step.
func (r *Reconciler) restartStep(ctx context.Context, s *scope, obs Observation) (bool, error) {
	t := s.machine.Spec.RestartRequestedAt
	if t == nil || !obs.Exists || obs.Task.InFlight() {
		return false, nil
	}
	running := obs.PowerState == banlieuev1.PowerStatePoweredOn
	rec := &s.status.Restart
	if !restartTakenUp(rec, t) {
		next := &infrav1.MachineRestart{RequestedAt: t.DeepCopy(), StartedAt: ptr.To(metav1.Now())}
		switch {
		case s.machine.DesiredPower() != banlieuev1.PowerStatePoweredOn:
			finishRestart(next, banlieuev1.RestartResultSkipped)
		case running && obs.BootID == "":
			if !obs.UpToDate {
				// A driver may give a running VM its boot ID in Update (libvirt): it is
				// asked to first.
				return false, nil
			}
			finishRestart(next, banlieuev1.RestartResultUnsupported)
		case running:
			next.BootID = obs.BootID
		}
		if err := r.recordRestart(ctx, s, next); err != nil {
			return false, err
		}
		rec = next
	}
	switch {
	case rec.Result != "":
		return false, nil
	case running && obs.BootID != "" && obs.BootID != rec.BootID:
		done := rec.DeepCopy()
		finishRestart(done, banlieuev1.RestartResultRestarted)
		return false, r.recordRestart(ctx, s, done)
	}
	return running && rec.BootID != "" && obs.BootID == rec.BootID, nil
}

// skipRestartBeforeCreate records a restart request the machine carries before its VM
// is made as Skipped, before the VM is made: otherwise a process killed right after
// Create would find the new VM running and the request not taken up, and restart it.
func (r *Reconciler) skipRestartBeforeCreate(ctx context.Context, s *scope) error {
	t := s.machine.Spec.RestartRequestedAt
	if t == nil || restartTakenUp(&s.status.Restart, t) {
		return nil
	}
	next := &infrav1.MachineRestart{RequestedAt: t.DeepCopy(), StartedAt: ptr.To(metav1.Now())}
	finishRestart(next, banlieuev1.RestartResultSkipped)
	return r.recordRestart(ctx, s, next)
}

// restartTakenUp reports whether rec records the request t.
func restartTakenUp(rec *infrav1.MachineRestart, t *metav1.Time) bool {
	return rec.RequestedAt != nil && rec.RequestedAt.Equal(t)
}

// finishRestart ends the restart rec with result.
func finishRestart(rec *infrav1.MachineRestart, result banlieuev1.RestartResult) {
	rec.CompletedAt, rec.Result = ptr.To(metav1.Now()), result
}

// recordRestart writes rec as status.restart, conditional on the machine's
// resourceVersion. On failure the status in memory is left as it was, so that the
// reconcile's last, unconditional status write does not store it either.
func (r *Reconciler) recordRestart(ctx context.Context, s *scope, rec *infrav1.MachineRestart) error {
	prev := s.status.Restart
	s.status.Restart = *rec
	if err := r.writeStatus(ctx, s, true); err != nil {
		s.status.Restart = prev
		return err
	}
	log := ctrl.LoggerFrom(ctx)
	if rec.Result == "" {
		log.Info("Restarting the VM", "requestedAt", rec.RequestedAt.UTC().Format(metav1.RFC3339Micro), "bootID", rec.BootID)
	} else {
		log.Info("Restart request done", "requestedAt", rec.RequestedAt.UTC().Format(metav1.RFC3339Micro), "result", rec.Result)
	}
	return nil
}
