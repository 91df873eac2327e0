package v1alpha1

// Conditions of an infrastructure machine besides Ready, as the provider SDK sets them.
const (
	// MachinePausedCondition is True while the provider leaves the machine alone: the
	// machine carries cluster.x-k8s.io/paused or banlieue.io/paused, its Provider's
	// spec.paused is true, or its Cluster API Cluster is paused (spec.paused or the
	// cluster.x-k8s.io/paused annotation). It is False otherwise, as Cluster API v1beta2 reports it.
	MachinePausedCondition = "Paused"

	// MachineRestartRequiredCondition is True while hardware changes the backend cannot
	// make as the VM runs wait for its next power cycle (a restart through
	// spec.restartRequestedAt, or a power-off and power-on); the message lists them. The
	// VM stays Ready meanwhile. It is False when no change waits.
	MachineRestartRequiredCondition = "RestartRequired"
)

// Reasons of an infrastructure machine's RestartRequired condition.
const (
	// MachineHardwareChangePendingReason: CPUs, memory or disks differ from the spec in a
	// way the backend applies only while the VM is off; the message says which.
	MachineHardwareChangePendingReason = "HardwareChangePending"

	// MachineNoPendingChangeReason: nothing waits for a power cycle.
	MachineNoPendingChangeReason = "NoPendingChange"
)

// Reasons of an infrastructure machine's Paused condition.
const (
	// MachinePausedReason: the machine, its VM, its Provider or its Cluster API Cluster is
	// paused; the message says which.
	MachinePausedReason = "Paused"

	// MachineNotPausedReason: the provider reconciles the machine.
	MachineNotPausedReason = "NotPaused"
)

// Reasons of an infrastructure machine's Ready condition, as the provider SDK sets them.
const (
	// MachineProvisionedReason: the backend VM exists and matches the spec.
	MachineProvisionedReason = "Provisioned"

	// MachineTaskInFlightReason: a backend task is in flight; used when the task's
	// operation has no reason of its own.
	MachineTaskInFlightReason = "TaskInFlight"

	// MachineCreatingReason: the backend VM is being created.
	MachineCreatingReason = "Creating"

	// MachineCloningReason: the backend VM is being cloned from its template.
	MachineCloningReason = "Cloning"

	// MachineUpdatingReason: the backend VM is being changed to match the spec.
	MachineUpdatingReason = "Updating"

	// MachineDeletingReason: the backend VM is being deleted.
	MachineDeletingReason = "Deleting"

	// MachineFailedReason: the backend refused the machine for good; the message says why.
	MachineFailedReason = "Failed"

	// MachineBackendUnreachableReason: the provider controller cannot reach the backend.
	MachineBackendUnreachableReason = "BackendUnreachable"

	// MachineProviderNotFoundReason: the Provider in spec.providerRef does not exist.
	MachineProviderNotFoundReason = "ProviderNotFound"

	// MachineCredentialsNotFoundReason: the Provider's credentials Secret does not exist.
	MachineCredentialsNotFoundReason = "CredentialsNotFound"

	// MachineTaskFailedReason: a backend task failed; the message carries the backend's
	// error and the provider retries with backoff.
	MachineTaskFailedReason = "TaskFailed"

	// MachineCredentialsRejectedReason: the backend refused the Provider's credentials.
	MachineCredentialsRejectedReason = "CredentialsRejected"

	// MachineUserDataNotFoundReason: the Secret or key in spec.userData, or the bootstrap
	// data Secret (its key "value") of the owning Cluster API Machine, does not exist.
	MachineUserDataNotFoundReason = "UserDataNotFound"

	// MachineUserDataTooLargeReason: the user data in spec.userData is larger than the
	// backend can hand to the guest; the message gives both sizes and what to do.
	MachineUserDataTooLargeReason = "UserDataTooLarge"

	// MachineUserDataNotPermittedReason: the Secret in spec.userData is not of a type
	// that may be handed to a guest (UserDataSecretType or Cluster API's bootstrap type).
	MachineUserDataNotPermittedReason = "UserDataNotPermitted"

	// MachineNotPermittedReason: the machine asks for something its Provider does not
	// offer its namespace (the Provider itself, a failure domain, a storage or network
	// target, an image); no backend call was made.
	MachineNotPermittedReason = "NotPermitted"

	// MachineTemplateNotFoundReason: the image's template does not exist on the backend.
	MachineTemplateNotFoundReason = "TemplateNotFound"

	// MachineResizeRequiresPowerOffReason: the backend can change the VM's CPUs or memory
	// only while it is powered off; the message says how to proceed.
	//
	// Deprecated: no built-in driver sets it since RestartRequired: a change that waits
	// for the VM's next power cycle leaves the machine Ready and says so in
	// MachineRestartRequiredCondition.
	MachineResizeRequiresPowerOffReason = "ResizeRequiresPowerOff"

	// MachineDiskShrinkNotSupportedReason: a disk was asked to shrink, which no backend does.
	MachineDiskShrinkNotSupportedReason = "DiskShrinkNotSupported"

	// MachineInvalidOptionsReason: the machine's backend block (spec.vsphere,
	// spec.libvirt, spec.proxmox) does not decode; the message says which field.
	MachineInvalidOptionsReason = "InvalidOptions"

	// MachinePlacementInvalidReason: the failure domain, folder, pool, storage or network
	// the machine asks for does not exist or cannot be reached from where it runs.
	MachinePlacementInvalidReason = "PlacementInvalid"

	// MachineNameConflictReason: a VM that banlieue did not make already has the name.
	MachineNameConflictReason = "NameConflict"

	// MachinePermissionDeniedReason: the backend user lacks a privilege the operation needs.
	MachinePermissionDeniedReason = "PermissionDenied"

	// MachineIdentityMismatchReason: a backend VM carries the machine's identity in one
	// place and another machine's in another; banlieue will not touch it.
	MachineIdentityMismatchReason = "IdentityMismatch"

	// MachineGuestStoppedReason: the hypervisor stopped the guest on its own (a crash,
	// an I/O error); the message says how to restart it.
	MachineGuestStoppedReason = "GuestStopped"

	// MachineHypervisorUnavailableReason: the hypervisor the Provider asks for cannot
	// run the VM on its host (QEMU cannot open /dev/kvm); the message quotes the backend.
	MachineHypervisorUnavailableReason = "HypervisorUnavailable"

	// MachineReleasingReason: the machine is deleted under deletionPolicy Retain and its
	// backend VM's identity marks are being removed; the VM itself is left as it is.
	MachineReleasingReason = "Releasing"

	// MachineAdoptingReason: the provider is marking the existing VM
	// that spec.adoptProviderID names as the machine's.
	MachineAdoptingReason = "Adopting"

	// MachineAdoptionTargetNotFoundReason: no VM of the Provider has
	// spec.adoptProviderID, or the adopted VM was deleted behind banlieue's back: the
	// provider never creates one in its place.
	MachineAdoptionTargetNotFoundReason = "AdoptionTargetNotFound"

	// MachineAdoptionTargetInvalidReason: spec.adoptProviderID names
	// what cannot be adopted: a template, an ID of another Provider's form, or one
	// several VMs share.
	MachineAdoptionTargetInvalidReason = "AdoptionTargetInvalid"

	// MachineAlreadyManagedReason: the VM spec.adoptProviderID names
	// carries another machine's identity mark: it is that machine's, and left alone.
	MachineAlreadyManagedReason = "AlreadyManaged"

	// MachineRetainNotSupportedReason: the machine is deleted under deletionPolicy Retain
	// but its provider cannot release a backend VM; the VM is kept, and so is the machine,
	// until its deletionPolicy is Delete.
	MachineRetainNotSupportedReason = "RetainNotSupported"

	// MachineReconcileErrorReason: an unexpected error; the message carries it.
	MachineReconcileErrorReason = "ReconcileError"

	// MachineWaitingForMachineOwnerReason: the machine carries the label
	// cluster.x-k8s.io/cluster-name but Cluster API's Machine controller has not adopted
	// it yet (no ownerReference to a cluster.x-k8s.io Machine); no VM is made until it has.
	MachineWaitingForMachineOwnerReason = "WaitingForMachineOwner"

	// MachineWaitingForClusterInfrastructureReason: the machine's Cluster API Cluster does
	// not exist or its status.initialization.infrastructureProvisioned is not true yet; no
	// VM is made until it is.
	MachineWaitingForClusterInfrastructureReason = "WaitingForClusterInfrastructure"

	// MachineWaitingForBootstrapDataReason: the Cluster API Machine that owns the machine
	// has no spec.bootstrap.dataSecretName yet; no VM is made until it has.
	MachineWaitingForBootstrapDataReason = "WaitingForBootstrapData"
)
