package providersdk

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// errGone says the deleted machine's VM is gone and the finalizer may go.
var errGone = errors.New("backend VM is gone")

// maxSyncSteps bounds the synchronous steps (a Create or an Update that returns without
// a task) one reconcile takes. A driver whose update is several synchronous calls (a
// config change, then a disk resize, then a power-on task) takes them in one reconcile
// instead of paying a status write and a requeue for each; the bound keeps an Update
// that never brings the VM up to date from holding a worker and calling the backend in
// a loop: the machine then waits as it would after one step.
const maxSyncSteps = 4

// reconcileNormal creates or updates the VM and records what it observes. Each Create
// and Update is handed the Observation that came just before it.
func (r *Reconciler) reconcileNormal(ctx context.Context, cl Client, p *banlieuev1.Provider, s *scope) error {
	obs, err := observe(ctx, cl, s.machine)
	if err != nil {
		return err
	}
	steps := 0
	if s.machine.Spec.Adopts() {
		if obs, err = r.adopt(ctx, cl, s, obs); err != nil {
			return err
		}
	} else if !obs.Task.InFlight() && !obs.Exists {
		// The image and the user data matter only to Create, and are checked just before it.
		if err := r.admitImage(ctx, p, s.machine); err != nil {
			return err
		}
		if s.machine.UserData, err = r.userData(ctx, s.machine, s.bootstrapFrom); err != nil {
			return err
		}
		if err := r.skipRestartBeforeCreate(ctx, s); err != nil {
			return err
		}
		res, err := cl.Create(ctx, s.machine, obs)
		if err != nil {
			return fmt.Errorf("failed to create VM: %w", err)
		}
		ctrl.LoggerFrom(ctx).Info("Created backend VM")
		s.recordDetails(res.Details)
		if res.Task.InFlight() {
			s.observe(obs, res.Task)
			return &InFlightError{Task: res.Task}
		}
		steps++
		if obs, err = observe(ctx, cl, s.machine); err != nil {
			return err
		}
		// A VM that a synchronous Create made but Observe does not see yet is waited
		// for, never created again in the same reconcile.
	}
	if obs, err = r.updateAndRestart(ctx, cl, s, obs, steps); err != nil {
		return err
	}
	s.observe(obs, obs.Task)
	switch {
	case obs.Task.InFlight():
		return &InFlightError{Task: obs.Task}
	case !obs.Exists:
		return &InFlightError{Task: Task{Operation: OperationCreate}}
	case !obs.UpToDate:
		return &InFlightError{Task: Task{Operation: OperationUpdate}}
	}
	if err := r.writeProviderID(ctx, s, obs.ProviderID); err != nil {
		return err
	}
	s.ready(metav1.ConditionTrue, infrav1.MachineProvisionedReason, "")
	s.succeeded = true
	s.waitingForGuest = obs.WaitingForGuest
	return nil
}

// adopt takes over the existing VM an adopting machine names, in place of Create: a VM
// that carries no mark yet is claimed through the Client's Adopter and observed again;
// a VM that is not there is never created. It returns the Observation of the VM as the
// machine's.
func (r *Reconciler) adopt(ctx context.Context, cl Client, s *scope, obs Observation) (Observation, error) {
	id := s.machine.Spec.AdoptProviderID
	switch {
	case obs.Task.InFlight():
		return obs, nil
	case !obs.Exists:
		return obs, Retryable(infrav1.MachineAdoptionTargetNotFoundReason,
			"no VM of the Provider has the provider ID %s; the adopted VM is never created, so check adoptProviderID and that the VM exists", id)
	case !obs.Unclaimed:
		return obs, nil
	}
	ad, ok := cl.(Adopter)
	if !ok {
		return obs, AdoptionTargetInvalid(id, fmt.Sprintf("the %s provider cannot adopt VMs", r.class))
	}
	res, err := ad.Adopt(ctx, s.machine, obs)
	if err != nil {
		return obs, fmt.Errorf("failed to adopt VM: %w", err)
	}
	if res.Task.InFlight() {
		s.observe(obs, res.Task)
		return obs, &InFlightError{Task: res.Task}
	}
	if obs, err = observe(ctx, cl, s.machine); err != nil {
		return obs, err
	}
	if obs.Unclaimed {
		return obs, &InFlightError{Task: Task{Operation: OperationAdopt}}
	}
	ctrl.LoggerFrom(ctx).Info("Adopted backend VM", "providerID", id)
	return obs, nil
}

// updateAndRestart brings the VM Observe found in line with the spec, taking the
// machine's restart request along (restartStep): a pass powers the VM off for the
// restart, the next powers it on, the last records that it is done, each with the
// Observation just before it. steps are the synchronous steps taken already.
func (r *Reconciler) updateAndRestart(ctx context.Context, cl Client, s *scope, obs Observation, steps int) (Observation, error) {
	want := s.machine.Spec.PowerState
	defer func() { s.machine.Spec.PowerState = want }()
	for range 3 {
		off, err := r.restartStep(ctx, s, obs)
		if err != nil {
			return obs, err
		}
		if off {
			s.machine.Spec.PowerState = banlieuev1.PowerStatePoweredOff
			obs.UpToDate = false
		}
		before := steps
		for ; !obs.Task.InFlight() && obs.Exists && !obs.UpToDate && steps < maxSyncSteps; steps++ {
			res, err := cl.Update(ctx, s.machine, obs)
			if err != nil {
				return obs, fmt.Errorf("failed to update VM: %w", err)
			}
			if res.Task.InFlight() {
				s.observe(obs, res.Task)
				return obs, &InFlightError{Task: res.Task}
			}
			if obs, err = observe(ctx, cl, s.machine); err != nil {
				return obs, err
			}
		}
		s.machine.Spec.PowerState = want
		switch {
		case off:
			// Powered off for the restart: observed again against the machine's own
			// desired power, which powers the VM on in the next pass.
			if obs, err = observe(ctx, cl, s.machine); err != nil {
				return obs, err
			}
		case steps == before:
			return obs, nil
		}
	}
	return obs, nil
}

// reconcileDelete deletes the VM; it returns errGone once nothing of it is left.
// Delete is called when Observe finds no VM too, once: a Create interrupted before it
// made the VM may have left volumes, seed images or snippets that only the driver
// knows how to find.
func (r *Reconciler) reconcileDelete(ctx context.Context, cl Client, s *scope) error {
	obs, err := observe(ctx, cl, s.machine)
	if err != nil {
		return err
	}
	// A task in flight comes first: a VM still being cloned may not be visible yet, and
	// releasing the machine then would orphan it.
	if obs.Task.InFlight() {
		s.setTask(obs.Task)
		return &InFlightError{Task: obs.Task}
	}
	if s.machine.Releasing() {
		return r.reconcileRelease(ctx, cl, s, obs)
	}
	if s.machine.Spec.Adopts() && (!obs.Exists || obs.Unclaimed) {
		// An adopting machine owns nothing but the VM it claimed: with no claimed VM there
		// is nothing of it to clean up, and an unclaimed one is not its to delete.
		return goneAfter(ctx, s, OperationDelete, deletedMessage)
	}
	res, err := cl.Delete(ctx, s.machine, obs)
	if err != nil {
		return fmt.Errorf("failed to delete VM: %w", err)
	}
	if !obs.Exists && !res.Task.InFlight() {
		return goneAfter(ctx, s, OperationDelete, deletedMessage)
	}
	return untilGone(ctx, cl, s, res.Task, OperationDelete, deletedMessage)
}

// deletedMessage and releasedMessage are logged once a deleted machine's VM is gone.
const (
	deletedMessage  = "Deleted backend VM"
	releasedMessage = "Released backend VM; it is left as it is"
)

// goneAfter returns errGone for a deleted machine whose VM Observe did not find,
// logging done when the machine's recorded task is op's: the VM went with a task that
// an earlier reconcile started and waited for, where untilGone could not see it go.
func goneAfter(ctx context.Context, s *scope, op, done string, keysAndValues ...any) error {
	if s.machine.Task.Operation == op {
		ctrl.LoggerFrom(ctx).Info(done, keysAndValues...)
	}
	return errGone
}

// untilGone follows a Delete or a Release (op) that returned task: it waits for the task
// in flight, then returns errGone, logging done, once Observe no longer finds the VM as
// the machine's, and op in flight until then.
func untilGone(ctx context.Context, cl Client, s *scope, task Task, op, done string, keysAndValues ...any) error {
	if task.InFlight() {
		s.setTask(task)
		return &InFlightError{Task: task}
	}
	obs, err := observe(ctx, cl, s.machine)
	if err != nil {
		return err
	}
	if !obs.Exists {
		ctrl.LoggerFrom(ctx).Info(done, keysAndValues...)
		return errGone
	}
	return &InFlightError{Task: Task{Operation: op}}
}

// reconcileRelease lets the VM of a machine deleted under deletionPolicy Retain go: it
// removes the machine's marks through the Client's Releaser and returns errGone once
// Observe no longer finds the VM as the machine's. Nothing is deleted, not even what an
// interrupted Create left behind. A Client that is no Releaser keeps the machine, and
// its VM, with RetainNotSupported: a VM is never destroyed against the user's wish.
func (r *Reconciler) reconcileRelease(ctx context.Context, cl Client, s *scope, obs Observation) error {
	if !obs.Exists {
		return goneAfter(ctx, s, OperationRelease, releasedMessage, "providerID", s.machine.Spec.ProviderID)
	}
	rel, ok := cl.(Releaser)
	if !ok {
		return Retryable(infrav1.MachineRetainNotSupportedReason,
			"deletionPolicy is Retain but the %s provider cannot release a backend VM; the VM and this machine are kept until deletionPolicy is Delete", r.class)
	}
	res, err := rel.Release(ctx, s.machine, obs)
	if err != nil {
		return fmt.Errorf("failed to release VM: %w", err)
	}
	return untilGone(ctx, cl, s, res.Task, OperationRelease, releasedMessage, "providerID", s.machine.Spec.ProviderID)
}

// observe asks the backend about the machine's VM.
func observe(ctx context.Context, cl Client, m *Machine) (Observation, error) {
	obs, err := cl.Observe(ctx, m)
	if err != nil {
		return Observation{}, fmt.Errorf("failed to observe VM: %w", err)
	}
	return obs, nil
}
