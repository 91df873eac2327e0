package virtualmachine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/placement"
	"github.com/banlieue/banlieue/pkg/contract"
)

// scope is what one reconcile of a VM knows.
type scope struct {
	vm     *banlieuev1.VirtualMachine
	before *banlieuev1.VirtualMachine

	// machine is the VM's infrastructure machine, nil when it does not exist.
	machine *contract.Machine
	// machines are the machines of its kind; set with machine.
	machines *machineKind
	// migrating is set while an old machine is removed before the VM moves.
	migrating bool
	// movedFrom is the Provider ("namespace/name") the VM left in this reconcile, once
	// its old machine is gone; the next placement completes the migration.
	movedFrom string
	// released is set once the finalizer is removed: the VM is no longer written.
	released bool
	// missingRef is set when the VM's class or image does not exist: the VM cannot be
	// placed, or re-resolved where it is, until it does.
	missingRef *metav1.Condition
	// placed is set once this reconcile recorded a new placement: its Scheduled Event
	// then also reports the machine's creation, which needs no Event of its own.
	placed bool
	// created is set once this reconcile created the VM's infrastructure machine.
	created bool
	// paused is set for a reconcile of a VM whose spec.paused is true: it marks the
	// machine and says so, and does not advance observedGeneration.
	paused bool
	// machinePaused is the machine's Paused condition when it says True (its Provider
	// is paused, say): the VM reports it as its own.
	machinePaused *metav1.Condition
	// machineFailed is set when the machine reports status.failureReason: its provider
	// has given up until the spec changes, and the VM is Failed.
	machineFailed bool
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) error {
	vm := s.vm
	live, image := &banlieuev1.VMClass{}, &banlieuev1.VMImage{}
	for _, ref := range []struct {
		obj    client.Object
		name   string
		kind   string
		reason string
		hint   string
	}{
		{live, vm.Spec.ClassRef.Name, "VMClass", banlieuev1.VirtualMachineClassNotFoundReason, "create it, or set spec.classRef to a class that exists"},
		{image, vm.Spec.ImageRef.Name, "VMImage", banlieuev1.VirtualMachineImageNotFoundReason, "create it (the VM's reference cannot be changed)"},
	} {
		if ref.obj == image && vm.Spec.AdoptProviderID != "" {
			// An adopted VM came from no banlieue image: image stays empty.
			continue
		}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: ref.name}, ref.obj); err != nil {
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("failed to get %s %s: %w", ref.kind, ref.name, err)
			}
			if ref.obj == live && vm.Status.AppliedClass.IsDefined() {
				// The VM runs on its copy of the class; ClassApplied says the class is gone.
				live = nil
				continue
			}
			s.missingRef = &metav1.Condition{Reason: ref.reason, Message: fmt.Sprintf("%s %s does not exist; %s", ref.kind, ref.name, ref.hint)}
			if ref.obj == live {
				setCondition(vm, banlieuev1.VirtualMachineClassAppliedCondition, false, s.missingRef.Reason, s.missingRef.Message)
			}
			if !vm.Status.Scheduled.IsDefined() {
				setCondition(vm, banlieuev1.VirtualMachineScheduledCondition, false, s.missingRef.Reason, s.missingRef.Message)
			}
			// A placed VM keeps its machine; only its Ready condition says what is wrong.
			return r.mirror(ctx, s)
		}
	}
	providers, err := r.providers(ctx)
	if err != nil {
		return err
	}
	sched := placement.NewScheduler(providers)
	// The class is chosen, and a new one recorded, before placement: the sticky
	// placement is validated with the class the machine is built from, so a class that
	// does not fit is refused where the VM runs and never moves it.
	class, err := r.chooseClass(ctx, s, live, sched)
	if err != nil {
		return err
	}
	req, err := r.placementRequest(ctx, vm, class, image)
	if invalid := (*invalidSelectorError)(nil); errors.As(err, &invalid) {
		// Retrying cannot help: the VM waits, saying why, until its spec is edited.
		msg := invalid.Error() + "; fix the VM's spec.placement"
		if !vm.Status.Scheduled.IsDefined() {
			setCondition(vm, banlieuev1.VirtualMachineScheduledCondition, false, banlieuev1.VirtualMachineNoCandidateReason, msg)
			return nil
		}
		setCondition(vm, banlieuev1.VirtualMachinePlacementValidCondition, false, banlieuev1.VirtualMachinePlacementInvalidReason,
			msg+"; the VM stays where it is")
		return r.mirror(ctx, s)
	}
	if err != nil {
		return err
	}

	if vm.Status.Scheduled.IsDefined() {
		current := locationOf(vm)
		req.Current = &current
		if d, why := sched.Validate(req, current); d != nil {
			setCondition(vm, banlieuev1.VirtualMachinePlacementValidCondition, true, banlieuev1.VirtualMachinePlacementValidReason, "")
			return r.ensureMachine(ctx, s, d, class, image)
		} else if moved, err := r.handleInvalidPlacement(ctx, s, why); err != nil || !moved {
			if err != nil {
				return err
			}
			return r.mirror(ctx, s)
		}
		req.Current = nil
	}

	if vm.Spec.AdoptProviderID != "" {
		d, reason, msg, err := r.adoptionPlacement(ctx, vm, sched, req)
		if err != nil || d == nil {
			if err == nil {
				setCondition(vm, banlieuev1.VirtualMachineScheduledCondition, false, reason, msg)
			}
			return err
		}
		return r.place(ctx, s, d, class, image)
	}
	if !r.locations.wait(ctx) {
		return ctx.Err()
	}
	d, rejections := sched.Schedule(req, r.locations.count)
	if d == nil {
		// Cut as setCondition cuts it, so that the comparison below holds for a long one.
		msg := truncate(placement.Message(vm.Namespace, rejections), maxConditionMessageBytes)
		if c := meta.FindStatusCondition(vm.Status.Conditions, banlieuev1.VirtualMachineScheduledCondition); c == nil || c.Message != msg {
			r.event(vm, corev1.EventTypeWarning, banlieuev1.VirtualMachineNoCandidateReason, "Schedule", "%s", msg)
		}
		setCondition(vm, banlieuev1.VirtualMachineScheduledCondition, false, banlieuev1.VirtualMachineNoCandidateReason, msg)
		return nil
	}
	return r.place(ctx, s, d, class, image)
}

// place records the decision d as the VM's placement, then creates its machine there.
func (r *Reconciler) place(ctx context.Context, s *scope, d *placement.Decision, class *banlieuev1.VMClass, image *banlieuev1.VMImage) error {
	vm := s.vm
	kind := d.Provider.Status.MachineKind
	vm.Status.Scheduled = banlieuev1.ScheduledPlacement{
		ProviderName:      d.ProviderName,
		ProviderNamespace: d.ProviderNamespace,
		ProviderClass:     d.Provider.Spec.ProviderClassRef.Name,
		FailureDomain:     d.FailureDomain,
		ScheduledAt:       ptr.To(metav1.Now()),
	}
	vm.Status.InfrastructureRef = banlieuev1.ContractVersionedObjectReference{APIGroup: kind.APIGroup, Kind: kind.Kind, Name: vm.Name}
	setCondition(vm, banlieuev1.VirtualMachinePlacementValidCondition, true, banlieuev1.VirtualMachinePlacementValidReason, "")
	// Written now what the VM says once its new machine exists, so that creating the
	// machine costs no second status write.
	machineNotReady(vm)
	vm.Status.ObservedGeneration = vm.Generation
	// The placement is recorded before the machine is created, so a controller that
	// dies in between finds it again instead of placing the VM a second time. The write
	// is conditional on the VM's resourceVersion: a reconcile working from a cache that
	// has not seen an earlier placement yet fails here instead of placing the VM twice.
	summarize(s)
	if err := r.patchStatus(ctx, s, true); err != nil {
		return err
	}
	// The placement's Events are reported after its conditional write, so only once.
	if s.movedFrom != "" {
		r.event(vm, corev1.EventTypeNormal, banlieuev1.VirtualMachineMigratedReason, "Migrate",
			"Old machine on Provider %s is gone; moved to Provider %s", s.movedFrom, d.ProviderKey())
	}
	// Scheduled waits for the machine, so that one Event says where the VM went and that
	// its machine exists; it is recorded even when creating the machine failed, and the
	// reconcile that creates it later reports MachineCreated.
	s.placed = true
	err := r.ensureMachine(ctx, s, d, class, image)
	note := fmt.Sprintf("Placed on Provider %s, failure domain %q", d.ProviderKey(), d.FailureDomain)
	if vm.Spec.AdoptProviderID != "" {
		note = fmt.Sprintf("Placed on Provider %s to adopt %s", d.ProviderKey(), vm.Spec.AdoptProviderID)
	}
	if s.created {
		note += fmt.Sprintf("; created %s %s", kind.Kind, vm.Name)
	}
	r.event(vm, corev1.EventTypeNormal, banlieuev1.VirtualMachineScheduledReason, "Schedule", "%s", note)
	return err
}

// adoptionPlacement chooses the Provider of a VM that adopts a backend VM; with no
// decision it returns the Scheduled reason and message that say why. Another VM of the
// namespace adopting the same backend VM is refused here, early and by name; the
// providers' claim on the backend is what makes two adoptions from anywhere safe.
func (r *Reconciler) adoptionPlacement(ctx context.Context, vm *banlieuev1.VirtualMachine, sched *placement.Scheduler, req *placement.Request) (*placement.Decision, string, string, error) {
	peers := &banlieuev1.VirtualMachineList{}
	if err := r.Client.List(ctx, peers, client.InNamespace(vm.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, "", "", fmt.Errorf("failed to list VirtualMachines: %w", err)
	}
	for i := range peers.Items {
		if p := &peers.Items[i]; p.UID != vm.UID && p.Spec.AdoptProviderID == vm.Spec.AdoptProviderID {
			return nil, banlieuev1.VirtualMachineAdoptionConflictReason,
				fmt.Sprintf("VirtualMachine %s adopts %s already; delete one of the two", p.Name, vm.Spec.AdoptProviderID), nil
		}
	}
	d, rejections, ambiguous := sched.Adopt(req)
	switch {
	case d != nil:
		return d, "", "", nil
	case len(ambiguous) > 0:
		return nil, banlieuev1.VirtualMachineAdoptionAmbiguousReason,
			fmt.Sprintf("Providers %s could each adopt %s; narrow spec.placement.providerSelector to one", strings.Join(ambiguous, ", "), vm.Spec.AdoptProviderID), nil
	}
	msg := truncate(fmt.Sprintf("no Provider can adopt %s: %s", vm.Spec.AdoptProviderID, placement.Message(vm.Namespace, rejections)), maxConditionMessageBytes)
	return nil, banlieuev1.VirtualMachineAdoptionNoProviderReason, msg, nil
}

// handleInvalidPlacement applies the VM's migration policy to a placement that no longer
// holds. It reports moved once the old machine is gone and the VM may be placed anew.
func (r *Reconciler) handleInvalidPlacement(ctx context.Context, s *scope, why string) (bool, error) {
	vm := s.vm
	switch {
	case vm.Spec.MigrationPolicy == banlieuev1.MigrationPolicyNever:
		setCondition(vm, banlieuev1.VirtualMachinePlacementValidCondition, false, banlieuev1.VirtualMachinePlacementInvalidReason,
			why+"; migrationPolicy is never, so the VM stays where it is")
		return false, nil
	case vm.Spec.MigrationPolicy == banlieuev1.MigrationPolicyManual && vm.Annotations[banlieuev1.MigrateAnnotation] != "true":
		setCondition(vm, banlieuev1.VirtualMachinePlacementValidCondition, false, banlieuev1.VirtualMachineWaitingForMigrateApprovalReason,
			why+"; set the annotation banlieue.io/migrate=true to move the VM")
		return false, nil
	}
	setCondition(vm, banlieuev1.VirtualMachinePlacementValidCondition, false, banlieuev1.VirtualMachineMigratingReason,
		why+"; moving the VM: its old machine is deleted first")
	s.migrating = true
	gone, err := r.deleteMachine(ctx, s)
	if err != nil || !gone {
		return false, err
	}
	s.movedFrom = locationOf(vm).ProviderKey()
	if _, ok := vm.Annotations[banlieuev1.MigrateAnnotation]; ok {
		before := vm.DeepCopy()
		delete(vm.Annotations, banlieuev1.MigrateAnnotation)
		if err := r.Client.Patch(ctx, vm, client.MergeFrom(before)); err != nil {
			return false, fmt.Errorf("failed to remove the %s annotation: %w", banlieuev1.MigrateAnnotation, err)
		}
		s.before.ObjectMeta = vm.ObjectMeta
	}
	s.migrating = false
	vm.Status.Scheduled = banlieuev1.ScheduledPlacement{}
	vm.Status.InfrastructureRef = banlieuev1.ContractVersionedObjectReference{}
	vm.Status.ProviderID = ""
	vm.Status.Addresses = nil
	vm.Status.Initialization = banlieuev1.Initialization{}
	vm.Status.ObservedPowerState = ""
	meta.RemoveStatusCondition(&vm.Status.Conditions, banlieuev1.VirtualMachineInfrastructureReadyCondition)
	return true, nil
}

// providers returns every Provider, from the cache.
func (r *Reconciler) providers(ctx context.Context) ([]*banlieuev1.Provider, error) {
	list := &banlieuev1.ProviderList{}
	// Every placement reads every Provider, whose status (failure domains, capabilities)
	// is the largest object core reads: copying them all was 9% of core's
	// allocations at 10,000 VMs. Placement only reads them (the scheduler's tests check
	// it leaves them as they were), so it reads the cache's own.
	if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("failed to list Providers: %w", err)
	}
	out := make([]*banlieuev1.Provider, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// placementRequest gathers what placement needs about vm from the cache.
func (r *Reconciler) placementRequest(ctx context.Context, vm *banlieuev1.VirtualMachine, class *banlieuev1.VMClass, image *banlieuev1.VMImage) (*placement.Request, error) {
	nsLabels, err := r.namespaceLabels(ctx, vm.Namespace)
	if err != nil {
		return nil, err
	}
	req := &placement.Request{Namespace: vm.Namespace, NamespaceLabels: nsLabels, Class: class, Image: image, AdoptProviderID: vm.Spec.AdoptProviderID}
	if req.ProviderSelector, err = selector("spec.placement.providerSelector", vm.Spec.Placement.ProviderSelector); err != nil {
		return nil, err
	}
	if req.FailureDomainSelector, err = selector("spec.placement.failureDomainSelector", vm.Spec.Placement.FailureDomainSelector); err != nil {
		return nil, err
	}
	for i, t := range vm.Spec.Placement.AntiAffinity {
		sel, err := selector(fmt.Sprintf("spec.placement.antiAffinity[%d].labelSelector", i), t.LabelSelector)
		if err != nil {
			return nil, err
		}
		if sel == nil {
			sel = labels.Everything()
		}
		peers := &banlieuev1.VirtualMachineList{}
		if err := r.Client.List(ctx, peers, client.InNamespace(vm.Namespace), client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("failed to list anti-affinity peers: %w", err)
		}
		term := placement.Term{TopologyKey: t.TopologyKey, Required: t.Mode != banlieuev1.AntiAffinityPreferred}
		for i := range peers.Items {
			p := &peers.Items[i]
			if p.UID == vm.UID || !p.Status.Scheduled.IsDefined() {
				continue
			}
			term.Peers = append(term.Peers, locationOf(p))
		}
		req.AntiAffinity = append(req.AntiAffinity, term)
	}
	return req, nil
}

// invalidSelectorError is a label selector of the VM's placement that the API server
// accepted but that does not parse, such as a key that is no label key.
type invalidSelectorError struct {
	field string
	err   error
}

func (e *invalidSelectorError) Error() string {
	return fmt.Sprintf("%s is invalid: %v", e.field, e.err)
}

// selector parses the selector at field; nil when it is unset.
func selector(field string, s *banlieuev1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s.AsMetav1())
	if err != nil {
		return nil, &invalidSelectorError{field: field, err: err}
	}
	return sel, nil
}

// machineGVK returns the kind of the VM's infrastructure machine, from its reference.
func (r *Reconciler) machineGVK(vm *banlieuev1.VirtualMachine) (schema.GroupVersionKind, error) {
	ref := vm.Status.InfrastructureRef
	m, err := r.mapper.RESTMapping(schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind})
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("failed to find the API version of %s.%s: %w", ref.Kind, ref.APIGroup, err)
	}
	return m.GroupVersionKind, nil
}

// getMachine reads the VM's infrastructure machine, of kind gvk, into s.machine, or
// nil when it is gone: from the cache, unless the cache's copy is older than core's
// own last write of it.
func (r *Reconciler) getMachine(ctx context.Context, s *scope, gvk schema.GroupVersionKind) error {
	k, err := r.machineKind(ctx, gvk)
	if err != nil {
		return err
	}
	s.machines = k
	return readMachine(ctx, k.reader, s)
}

// readMachine reads the VM's infrastructure machine with reader into s.machine, or nil
// when it does not exist.
func readMachine(ctx context.Context, reader client.Reader, s *scope) error {
	m := s.machines.newMachine()
	key := client.ObjectKey{Namespace: s.vm.Namespace, Name: s.vm.Status.InfrastructureRef.Name}
	err := reader.Get(ctx, key, m)
	switch {
	case apierrors.IsNotFound(err):
		s.machine = nil
		s.machines.written.Forget(key)
		return nil
	case err != nil:
		return fmt.Errorf("failed to get %s %s: %w", s.machines.gvk.Kind, s.vm.Status.InfrastructureRef.Name, err)
	}
	s.machine = m
	return nil
}

// ensureMachine creates or updates the VM's infrastructure machine with server-side
// apply, skipping the write when the machine already carries the desired spec.
func (r *Reconciler) ensureMachine(ctx context.Context, s *scope, d *placement.Decision, class *banlieuev1.VMClass, image *banlieuev1.VMImage) error {
	vm := s.vm
	kind := d.Provider.Status.MachineKind
	gvk := schema.GroupVersionKind{Group: kind.APIGroup, Version: kind.Version, Kind: kind.Kind}
	if err := r.getMachine(ctx, s, gvk); err != nil {
		return err
	}
	if s.machine == nil {
		// The reconcile that follows the placement's own status write usually finds a
		// cache that has not seen the machine created a moment ago; a read costs the API
		// server less than applying the machine a second time.
		if err := readMachine(ctx, s.machines.client, s); err != nil {
			return err
		}
	}
	if s.machine != nil && !metav1.IsControlledBy(s.machine, vm) {
		return fmt.Errorf("%s %s exists and is not controlled by this VirtualMachine; delete or rename it", gvk.Kind, s.machine.GetName())
	}
	if err := r.markPaused(ctx, s, false); err != nil {
		return err
	}
	spec := machineSpec(vm, d, class, image)
	desired, err := contract.NewMachine(gvk, vm.Namespace, vm.Name, spec)
	if err != nil {
		return err
	}
	if err := controllerutil.SetControllerReference(vm, desired, r.scheme); err != nil {
		return fmt.Errorf("failed to set the machine's owner: %w", err)
	}
	if s.machine == nil || !equality.Semantic.DeepDerivative(spec, s.machine.Spec) {
		if err := s.machines.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(desired), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("failed to apply %s %s: %w", gvk.Kind, vm.Name, err)
		}
		if s.machine == nil {
			s.created = true
			if !s.placed {
				// A placed VM whose machine was not created with its placement (an error,
				// a restart in between) or is gone; a new placement's Scheduled Event says it.
				r.event(vm, corev1.EventTypeNormal, banlieuev1.VirtualMachineMachineCreatedReason, "Create",
					"Created %s %s on Provider %s", gvk.Kind, vm.Name, d.ProviderKey())
			}
			ctrl.LoggerFrom(ctx).Info("Created infrastructure machine", gvk.Kind, klog.KRef(vm.Namespace, vm.Name),
				"Provider", klog.KRef(d.ProviderNamespace, d.ProviderName))
		}
		applied := s.machines.newMachine()
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(desired.Object, applied); err != nil {
			return fmt.Errorf("failed to read the applied %s %s: %w", gvk.Kind, vm.Name, err)
		}
		s.machine = applied
	}
	return r.mirror(ctx, s)
}

// reconcilePaused marks the machine of the paused VM, so that its provider leaves the
// backend VM alone until the VM is unpaused. The VM's status says it is paused
// (summarize) and is otherwise left as it was.
func (r *Reconciler) reconcilePaused(ctx context.Context, s *scope) error {
	s.paused = true
	vm := s.vm
	if !vm.Status.InfrastructureRef.IsDefined() {
		return nil
	}
	gvk, err := r.machineGVK(vm)
	if err != nil {
		return err
	}
	if err := r.getMachine(ctx, s, gvk); err != nil {
		return err
	}
	return r.markPaused(ctx, s, true)
}

// markPaused sets or removes infrav1.PausedAnnotation on the VM's machine (none yet:
// nothing to mark).
func (r *Reconciler) markPaused(ctx context.Context, s *scope, paused bool) error {
	m := s.machine
	if m == nil {
		return nil
	}
	if _, marked := m.GetAnnotations()[infrav1.PausedAnnotation]; marked == paused {
		return nil
	}
	before := m.DeepCopy()
	a := m.GetAnnotations()
	if paused {
		if a == nil {
			a = map[string]string{}
		}
		a[infrav1.PausedAnnotation] = "the VirtualMachine's spec.paused is true"
	} else {
		delete(a, infrav1.PausedAnnotation)
	}
	m.SetAnnotations(a)
	if err := s.machines.client.Patch(ctx, m, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("failed to mark %s %s paused=%t: %w", s.machines.gvk.Kind, m.Name, paused, err))
	}
	return nil
}

// machineSpec resolves the VM's class, image and placement into the contract's spec.
func machineSpec(vm *banlieuev1.VirtualMachine, d *placement.Decision, class *banlieuev1.VMClass, image *banlieuev1.VMImage) infrav1.MachineSpec {
	spec := infrav1.MachineSpec{
		ProviderRef:     infrav1.ProviderRef{Namespace: d.ProviderNamespace, Name: d.ProviderName},
		FailureDomain:   d.FailureDomain,
		AdoptProviderID: vm.Spec.AdoptProviderID,
		Hardware: infrav1.MachineHardware{
			CPUs: class.Spec.Hardware.CPUs, MemoryMiB: class.Spec.Hardware.MemoryMiB, Firmware: class.Spec.Firmware,
		},
		PowerState:         vm.Spec.DesiredPowerState,
		DeletionPolicy:     deletionPolicy(vm),
		RestartRequestedAt: vm.Spec.RestartRequestedAt.DeepCopy(),
	}
	if vm.Spec.UserData.IsDefined() {
		spec.UserData = vm.Spec.UserData.DeepCopy()
	}
	if src := image.SourceFor(d.Provider.Spec.ProviderClassRef.Name); src != nil {
		spec.Image = infrav1.MachineImage{Name: image.Name, Kind: src.Kind, Ref: src.Ref, ImportFrom: src.ImportFrom, Checksum: src.Checksum}
		if row := image.ProviderStatus(d.ProviderNamespace, d.ProviderName); row != nil {
			spec.Image.ResolvedRef = row.ResolvedRef
		}
	}
	for _, disk := range class.Spec.Hardware.Disks {
		spec.Disks = append(spec.Disks, infrav1.MachineDisk{
			Name: disk.Name, SizeGiB: disk.SizeGiB, Provisioning: disk.Provisioning, StorageClass: disk.StorageClass,
			Target: d.Provider.StorageClass(disk.StorageClass).Target,
		})
	}
	for _, nic := range class.Spec.Network.Interfaces {
		spec.Interfaces = append(spec.Interfaces, infrav1.MachineInterface{
			Name: nic.Name, NetworkClass: nic.NetworkClass, IPAM: nic.IPAM.DeepCopy(), MTU: nic.MTU,
			Target: d.Provider.NetworkClass(nic.NetworkClass).Target,
		})
	}
	return spec
}

// mirror copies the machine's contract status onto the VM.
func (r *Reconciler) mirror(ctx context.Context, s *scope) error {
	vm := s.vm
	if !vm.Status.InfrastructureRef.IsDefined() {
		return nil
	}
	if s.machine == nil {
		gvk, err := r.machineGVK(vm)
		if err != nil {
			return err
		}
		if err := r.getMachine(ctx, s, gvk); err != nil {
			return err
		}
	}
	if s.machine == nil {
		setCondition(vm, banlieuev1.VirtualMachineInfrastructureReadyCondition, false, banlieuev1.VirtualMachineMachineNotFoundReason,
			fmt.Sprintf("%s %s does not exist yet", vm.Status.InfrastructureRef.Kind, vm.Status.InfrastructureRef.Name))
		return nil
	}
	status := *s.machine.Status.DeepCopy()
	// What the machine says is written by its provider from the backend's answers; the
	// VM's tenant reads it only sanitized, without the Provider's endpoint or Secret.
	provider, err := r.scheduledProvider(ctx, vm)
	if err != nil {
		return err
	}
	for i := range status.Conditions {
		status.Conditions[i].Message = placement.Sanitize(provider, status.Conditions[i].Message)
	}
	vm.Status.ProviderID = s.machine.Spec.ProviderID
	vm.Status.Addresses = status.Addresses
	vm.Status.Initialization = banlieuev1.Initialization{Provisioned: status.Initialization.Provisioned}
	vm.Status.ObservedPowerState = status.PowerState
	vm.Status.Hardware = ptr.Deref(status.Hardware, banlieuev1.ObservedHardware{})
	vm.Status.Restart = restartOf(status.Restart)
	s.machineFailed = status.FailureReason != ""
	if p := meta.FindStatusCondition(status.Conditions, infrav1.MachinePausedCondition); p != nil && p.Status == metav1.ConditionTrue {
		s.machinePaused = p
	}
	// A resize the backend makes only at the next power cycle: the VM says so, and stays
	// Ready.
	if rr := meta.FindStatusCondition(status.Conditions, infrav1.MachineRestartRequiredCondition); rr != nil {
		setCondition(vm, banlieuev1.VirtualMachineRestartRequiredCondition, rr.Status == metav1.ConditionTrue, rr.Reason, rr.Message)
	} else {
		meta.RemoveStatusCondition(&vm.Status.Conditions, banlieuev1.VirtualMachineRestartRequiredCondition)
	}
	c := meta.FindStatusCondition(status.Conditions, banlieuev1.ReadyCondition)
	switch cur := meta.FindStatusCondition(vm.Status.Conditions, banlieuev1.VirtualMachineInfrastructureReadyCondition); {
	case keepsProgress(cur, c):
		// A machine moving from one step under way to another does not wake the VM (see
		// machineChanged), and a reconcile woken by something else does not copy that
		// move either: the VM's status does not depend on when core looked, and such a
		// look costs no write. The VM keeps the reason it had, which still says that the
		// machine is not Ready yet; the machine's own Ready condition names the step.
		setCondition(vm, banlieuev1.VirtualMachineInfrastructureReadyCondition, false, cur.Reason, cur.Message)
	case c == nil:
		machineNotReady(vm)
	default:
		setCondition(vm, banlieuev1.VirtualMachineInfrastructureReadyCondition, c.Status == metav1.ConditionTrue, c.Reason, c.Message)
	}
	return nil
}

// restartOf is the VM's view of the machine's status.restart: the request, and when and
// how it was honoured; empty when the machine took up none.
func restartOf(r infrav1.MachineRestart) banlieuev1.RestartStatus {
	return banlieuev1.RestartStatus{RequestedAt: r.RequestedAt.DeepCopy(), CompletedAt: r.CompletedAt.DeepCopy(), Result: r.Result}
}

// scheduledProvider returns the Provider the VM is placed on: the cache's own object,
// not a copy, which Sanitize only reads and nothing may change; nil when it is gone
// (its machine then says so, and Sanitize still redacts).
func (r *Reconciler) scheduledProvider(ctx context.Context, vm *banlieuev1.VirtualMachine) (*banlieuev1.Provider, error) {
	if !vm.Status.Scheduled.IsDefined() {
		return nil, nil
	}
	p := &banlieuev1.Provider{}
	key := client.ObjectKey{Namespace: vm.Status.Scheduled.ProviderNamespace, Name: vm.Status.Scheduled.ProviderName}
	if err := r.Client.Get(ctx, key, p, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to get Provider %s: %w", key, err)
	}
	return p, nil
}

// keepsProgress reports whether the VM's InfrastructureReady condition cur stays as it
// is while the machine's Ready condition is ready (nil: none yet, which the VM reads as
// MachineNotReady): both say that a step is under way. MachineNotFound does not stay:
// "does not exist yet" is no longer true of a machine that was read.
func keepsProgress(cur, ready *metav1.Condition) bool {
	if cur == nil || !inProgress(cur.Status, cur.Reason) || cur.Reason == banlieuev1.VirtualMachineMachineNotFoundReason {
		return false
	}
	return ready == nil || inProgress(ready.Status, ready.Reason)
}

// machineNotReady says that the VM's machine exists and is not Ready yet. It is what
// the VM says from its placement until the machine is Ready or reports a failure.
func machineNotReady(vm *banlieuev1.VirtualMachine) {
	setCondition(vm, banlieuev1.VirtualMachineInfrastructureReadyCondition, false, banlieuev1.VirtualMachineMachineNotReadyReason,
		fmt.Sprintf("waiting for %s %s to be Ready; its own Ready condition names the step under way once its provider has reconciled it",
			vm.Status.InfrastructureRef.Kind, vm.Status.InfrastructureRef.Name))
}

// deleteMachine deletes the VM's infrastructure machine and reports whether it is gone.
func (r *Reconciler) deleteMachine(ctx context.Context, s *scope) (bool, error) {
	vm := s.vm
	if !vm.Status.InfrastructureRef.IsDefined() {
		return true, nil
	}
	gvk, err := r.machineGVK(vm)
	if err != nil {
		return false, err
	}
	if err := r.getMachine(ctx, s, gvk); err != nil {
		return false, err
	}
	if s.machine == nil {
		return true, nil
	}
	// The machine is deleted under the policy the VM has now (a user sets Retain just
	// before deleting, or Delete to unblock a Retain its provider cannot honour), written
	// before the deletion so that its provider never reads another; a migration always
	// deletes the old backend VM, lest the VM run twice.
	policy := deletionPolicy(vm)
	if s.migrating {
		policy = banlieuev1.DeletionPolicyDelete
	}
	if err := setDeletionPolicy(ctx, s, policy); err != nil {
		return false, err
	}
	if s.machine.GetDeletionTimestamp().IsZero() {
		if err := s.machines.client.Delete(ctx, s.machine); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("failed to delete %s %s: %w", gvk.Kind, s.machine.GetName(), err)
		}
		r.event(vm, corev1.EventTypeNormal, banlieuev1.VirtualMachineMachineDeletingReason, "Delete", "Deleting %s %s", gvk.Kind, s.machine.GetName())
	}
	// The machine's watch brings the VM back once its provider has removed it.
	return false, nil
}

// deletionPolicy is the VM's spec.deletionPolicy, Delete when unset.
func deletionPolicy(vm *banlieuev1.VirtualMachine) banlieuev1.DeletionPolicy {
	if vm.Spec.DeletionPolicy == "" {
		return banlieuev1.DeletionPolicyDelete
	}
	return vm.Spec.DeletionPolicy
}

// setDeletionPolicy makes the VM's machine carry policy in spec.deletionPolicy (unset
// reads as Delete), with one patch when it does not yet, also once it is being deleted.
func setDeletionPolicy(ctx context.Context, s *scope, policy banlieuev1.DeletionPolicy) error {
	m := s.machine
	cur := m.Spec.DeletionPolicy
	if cur == policy || (cur == "" && policy == banlieuev1.DeletionPolicyDelete) {
		return nil
	}
	before := m.DeepCopy()
	m.Spec.DeletionPolicy = policy
	if err := s.machines.client.Patch(ctx, m, client.MergeFrom(before), client.FieldOwner(FieldManager)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("failed to set the deletionPolicy of %s %s to %s: %w", s.machines.gvk.Kind, m.Name, policy, err))
	}
	return nil
}

func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) error {
	setCondition(s.vm, banlieuev1.ReadyCondition, false, banlieuev1.VirtualMachineDeletingReason, "waiting for the infrastructure machine to be deleted")
	gone, err := r.deleteMachine(ctx, s)
	if err != nil || !gone {
		err = errors.Join(err, r.mirrorIfPresent(ctx, s))
		if c := meta.FindStatusCondition(s.vm.Status.Conditions, banlieuev1.VirtualMachineInfrastructureReadyCondition); c != nil &&
			c.Status != metav1.ConditionTrue && c.Reason == infrav1.MachineRetainNotSupportedReason {
			setCondition(s.vm, banlieuev1.ReadyCondition, false, banlieuev1.VirtualMachineRetainNotSupportedReason,
				"deletionPolicy is Retain but the Provider cannot release the backend VM, so it is kept, and so is the VM; set deletionPolicy to Delete to delete it")
		}
		return err
	}
	if controllerutil.ContainsFinalizer(s.vm, banlieuev1.VirtualMachineFinalizer) {
		before := s.vm.DeepCopy()
		controllerutil.RemoveFinalizer(s.vm, banlieuev1.VirtualMachineFinalizer)
		// Conditional, like a reported step: a VM read from a stale cache that still shows
		// the finalizer fails here instead of reporting the removal twice.
		err := r.Client.Patch(ctx, s.vm, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("failed to remove finalizer: %w", err)
		}
		if ref := s.vm.Status.InfrastructureRef; err == nil && ref.IsDefined() {
			r.machineGoneEvent(s.vm)
		}
	}
	// The object is gone or about to be; its status needs no more writes.
	s.released = true
	return nil
}

// machineGoneEvent records that the deleted VM's machine is gone: Released when the
// VM was deleted under deletionPolicy Retain with a backend VM, which runs on;
// MachineDeleted otherwise.
func (r *Reconciler) machineGoneEvent(vm *banlieuev1.VirtualMachine) {
	if deletionPolicy(vm) == banlieuev1.DeletionPolicyRetain && vm.Status.ProviderID != "" {
		r.event(vm, corev1.EventTypeNormal, banlieuev1.VirtualMachineReleasedReason, "Release",
			"backend VM %s left running; banlieue no longer manages it", vm.Status.ProviderID)
		return
	}
	ref := vm.Status.InfrastructureRef
	r.event(vm, corev1.EventTypeNormal, banlieuev1.VirtualMachineMachineDeletedReason, "Delete", "%s %s is gone", ref.Kind, ref.Name)
}

func (r *Reconciler) mirrorIfPresent(ctx context.Context, s *scope) error {
	if s.machine == nil {
		return nil
	}
	return r.mirror(ctx, s)
}
