package v1alpha1

// Condition types shared by banlieue's objects.
const (
	// ReadyCondition is true when an object is fully usable: a VM running as asked, a
	// Provider accepting machines, an infrastructure machine provisioned.
	ReadyCondition = "Ready"

	// VirtualMachineScheduledCondition is true when the VM has a valid placement.
	VirtualMachineScheduledCondition = "Scheduled"

	// VirtualMachineInfrastructureReadyCondition mirrors the infrastructure machine's Ready condition.
	VirtualMachineInfrastructureReadyCondition = "InfrastructureReady"

	// VirtualMachinePlacementValidCondition is false when the VM's current placement no
	// longer satisfies its spec and it has not (yet) moved.
	VirtualMachinePlacementValidCondition = "PlacementValid"

	// VirtualMachineClassAppliedCondition is true when the VM's machine is built from the
	// class its spec asks for; false when core refused to apply it (the VM keeps the copy
	// in status.appliedClass) or the VMClass does not exist.
	VirtualMachineClassAppliedCondition = "ClassApplied"

	// VirtualMachineRestartRequiredCondition mirrors the infrastructure machine's
	// RestartRequired condition: true while hardware changes (a resize the backend cannot
	// make as the VM runs) wait for the VM's next restart or power cycle. The VM stays
	// Ready meanwhile.
	VirtualMachineRestartRequiredCondition = "RestartRequired"

	// VirtualMachinePausedCondition is true while the VM is left alone: its spec.paused
	// is true, or its infrastructure machine reports itself paused (its Provider is
	// paused). It is false otherwise, as Cluster API v1beta2 reports Paused.
	VirtualMachinePausedCondition = "Paused"

	// ProviderBackendReachableCondition is true when the provider controller can reach the backend.
	ProviderBackendReachableCondition = "BackendReachable"

	// ProviderCredentialsValidCondition is true when the backend accepted the credentials.
	ProviderCredentialsValidCondition = "CredentialsValid"
)

// Condition reasons set by the core controller.
const (
	// VirtualMachineScheduledReason: a placement was found and is in force.
	VirtualMachineScheduledReason = "Scheduled"

	// VirtualMachineNoCandidateReason: no Provider and failure domain satisfy the VM; the
	// message names every Provider and why it was rejected.
	VirtualMachineNoCandidateReason = "NoCandidate"

	// VirtualMachineClassNotFoundReason: the VMClass in classRef does not exist. A VM
	// that has a copy of its class in status.appliedClass keeps running on it, and says
	// so only with ClassApplied; one that has none is not placed.
	VirtualMachineClassNotFoundReason = "ClassNotFound"

	// VirtualMachineClassAppliedReason: the machine is built from the class the spec asks
	// for, as recorded in status.appliedClass.
	VirtualMachineClassAppliedReason = "Applied"

	// VirtualMachineDiskShrinkRefusedReason: the new class has a disk smaller than the
	// VM's; disks only grow. The VM keeps the class it has.
	VirtualMachineDiskShrinkRefusedReason = "DiskShrinkRefused"

	// VirtualMachineResizeUnsupportedReason: the new class removes, renames or reorders a
	// disk, changes an existing disk's storageClass or provisioning, or changes the
	// firmware or the network interfaces, which an existing VM cannot take. The VM keeps
	// the class it has.
	VirtualMachineResizeUnsupportedReason = "ResizeUnsupported"

	// VirtualMachineResizeDoesNotFitReason: the VM's current Provider or failure domain
	// cannot run the new class (a storage class, network class or feature it lacks); a
	// resize never moves a VM, so the VM keeps the class it has.
	VirtualMachineResizeDoesNotFitReason = "ResizeDoesNotFit"

	// VirtualMachineImageNotFoundReason: the VMImage in imageRef does not exist.
	VirtualMachineImageNotFoundReason = "ImageNotFound"

	// VirtualMachineAdoptionNoProviderReason (Scheduled=False) means no Provider can adopt
	// the VM that adoptProviderID names: none has a providerIDPrefix that starts it, or
	// those that do have adoptionPolicy Disabled, are not Ready or are not selected.
	VirtualMachineAdoptionNoProviderReason = "AdoptionNoProvider"

	// VirtualMachineAdoptionAmbiguousReason (Scheduled=False) means several Providers
	// could adopt the VM (two vCenters reach one BIOS UUID); narrow
	// spec.placement.providerSelector to one.
	VirtualMachineAdoptionAmbiguousReason = "AdoptionAmbiguous"

	// VirtualMachineAdoptionConflictReason (Scheduled=False) means another VirtualMachine
	// of the namespace adopts the same backend VM already.
	VirtualMachineAdoptionConflictReason = "AdoptionConflict"

	// VirtualMachinePausedReason: the VM, or its Provider, is paused.
	VirtualMachinePausedReason = "Paused"

	// VirtualMachineNotPausedReason: neither the VM nor its machine is paused.
	VirtualMachineNotPausedReason = "NotPaused"

	// VirtualMachinePlacementValidReason: the current placement still satisfies the spec.
	VirtualMachinePlacementValidReason = "Valid"

	// VirtualMachinePlacementInvalidReason: the current placement no longer satisfies the
	// spec and migrationPolicy is never.
	VirtualMachinePlacementInvalidReason = "PlacementInvalid"

	// VirtualMachineWaitingForMigrateApprovalReason: the placement is no longer valid and
	// migrationPolicy manual waits for the banlieue.io/migrate annotation.
	VirtualMachineWaitingForMigrateApprovalReason = "WaitingForMigrateApproval"

	// VirtualMachineMigratingReason: the old machine is being deleted before the VM moves.
	VirtualMachineMigratingReason = "Migrating"

	// VirtualMachineMachineNotFoundReason: the infrastructure machine does not exist yet.
	VirtualMachineMachineNotFoundReason = "MachineNotFound"

	// VirtualMachineMachineNotReadyReason: the machine exists and is not Ready yet: it reports
	// no Ready condition yet, or a step under way that the machine's own Ready condition names.
	VirtualMachineMachineNotReadyReason = "MachineNotReady"

	// VirtualMachinePowerStateMismatchReason: the machine is ready but not yet in the asked-for power state.
	VirtualMachinePowerStateMismatchReason = "PowerStateMismatch"

	// VirtualMachineRunningReason: the VM is provisioned and in the asked-for power state.
	VirtualMachineRunningReason = "Running"

	// VirtualMachineDeletingReason: the VM is being deleted and waits for its machine to go.
	VirtualMachineDeletingReason = "Deleting"

	// VirtualMachineRetainNotSupportedReason: the VM is deleted with deletionPolicy Retain
	// and its Provider cannot release the backend VM; both are kept until deletionPolicy
	// is Delete.
	VirtualMachineRetainNotSupportedReason = "RetainNotSupported"
)

// Condition reasons set on a Provider by the provider controller that claims its class.
const (
	// ProviderReadyReason: the backend is reachable, accepts the credentials, and the
	// inventory was read.
	ProviderReadyReason = "Ready"

	// ProviderBackendReachableReason: the provider controller reached the backend.
	ProviderBackendReachableReason = "Reachable"

	// ProviderBackendUnreachableReason: the backend did not answer, or its certificate
	// could not be verified; the message says which.
	ProviderBackendUnreachableReason = "Unreachable"

	// ProviderCredentialsValidReason: the backend accepted the credentials.
	ProviderCredentialsValidReason = "Valid"

	// ProviderCredentialsRejectedReason: the backend refused the credentials.
	ProviderCredentialsRejectedReason = "CredentialsRejected"

	// ProviderCredentialsNotFoundReason: the credentials Secret, or the CA bundle's
	// ConfigMap or Secret, or a key in it, does not exist.
	ProviderCredentialsNotFoundReason = "CredentialsNotFound"

	// ProviderCredentialsInvalidReason: the credentials are malformed, e.g. a key is missing.
	ProviderCredentialsInvalidReason = "CredentialsInvalid"

	// ProviderNotCheckedReason: the condition could not be checked because an earlier
	// step failed.
	ProviderNotCheckedReason = "NotChecked"

	// ProviderPausedReason: the Provider is paused; its backend is not contacted.
	ProviderPausedReason = "Paused"

	// ProviderDeletionBlockedReason: the Provider is being deleted and waits until no
	// infrastructure machine runs on it.
	ProviderDeletionBlockedReason = "DeletionBlocked"

	// ProviderInventoryFailedReason: the backend answered but its inventory could not
	// be read; the message carries the error.
	ProviderInventoryFailedReason = "InventoryFailed"

	// ProviderNamespaceSelectorInvalidReason: spec.namespaceSelector does not parse, so
	// the Provider admits no namespace; only its own status says why, as a tenant's VM
	// only counts it among the Providers that do not admit its namespace.
	ProviderNamespaceSelectorInvalidReason = "NamespaceSelectorInvalid"

	// ProviderShardConflictReason: the --provider-selector of two live provider shards
	// of the class match the Provider, so neither acts on it nor on its machines; the
	// message names both.
	ProviderShardConflictReason = "ShardConflict"
)

// Reasons of a VMImage's status.perProvider rows, as providers write them.
const (
	// ImageTemplateNotFoundReason: the template does not exist on the backend and no
	// importFrom URL says where to import it from.
	ImageTemplateNotFoundReason = "TemplateNotFound"

	// ImageImportingReason: the image is being imported; the message gives the progress.
	ImageImportingReason = "Importing"

	// ImageImportFailedReason: the import failed (download, checksum, upload); the
	// message says why. It is retried later.
	ImageImportFailedReason = "ImportFailed"

	// ImageUnsupportedSourceReason: the source's kind means nothing to this backend.
	ImageUnsupportedSourceReason = "UnsupportedSource"
)

// Reasons of the Events the core controller records on a VirtualMachine, one per
// lifecycle step. Reasons shared with conditions (Scheduled, NoCandidate, Migrating,
// Running) are the constants above.
const (
	// VirtualMachineMachineCreatedReason: the infrastructure machine was created.
	VirtualMachineMachineCreatedReason = "MachineCreated"

	// VirtualMachineMachineDeletingReason: the infrastructure machine is being deleted.
	VirtualMachineMachineDeletingReason = "MachineDeleting"

	// VirtualMachineMachineDeletedReason: the infrastructure machine, and its backend VM,
	// are gone.
	VirtualMachineMachineDeletedReason = "MachineDeleted"

	// VirtualMachineInfrastructureReadyReason: the infrastructure machine turned Ready.
	VirtualMachineInfrastructureReadyReason = "InfrastructureReady"

	// VirtualMachineInfrastructureProgressingReason: the infrastructure machine is not
	// Ready because a step is in progress (Creating, Cloning, Updating, Deleting).
	VirtualMachineInfrastructureProgressingReason = "InfrastructureProgressing"

	// VirtualMachineInfrastructureFailedReason: the infrastructure machine is not Ready
	// because something failed (a task, the backend, credentials); a Warning.
	VirtualMachineInfrastructureFailedReason = "InfrastructureFailed"

	// VirtualMachineStoppedReason: the VM is provisioned and powered off.
	VirtualMachineStoppedReason = "Stopped"

	// VirtualMachineMigratedReason: the VM's old machine is gone and the VM is placed on
	// its new Provider.
	VirtualMachineMigratedReason = "Migrated"

	// VirtualMachineResizedReason: a new class was recorded in status.appliedClass for a
	// placed VM, and its machine is being changed to it.
	VirtualMachineResizedReason = "Resized"

	// VirtualMachineReleasedReason: the VM was deleted with deletionPolicy Retain and its
	// machine is gone; the backend VM runs on, without banlieue's marks.
	VirtualMachineReleasedReason = "Released"

	// VirtualMachineRestartedReason: the machine reports that the restart asked for by
	// spec.restartRequestedAt is done (status.restart.result Restarted).
	VirtualMachineRestartedReason = "Restarted"

	// VirtualMachineAdoptedReason is the Event of a VM whose machine took over its
	// existing backend VM.
	VirtualMachineAdoptedReason = "Adopted"
)

// Reasons of the Events a provider controller records on a Provider.
const (
	// ProviderOrphanDeletedReason: spec.orphanPolicy Delete deleted a backend VM this
	// cluster marked, whose machine is gone.
	ProviderOrphanDeletedReason = "OrphanDeleted"
)
