package v1alpha1

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

	// MachineUserDataNotFoundReason: the Secret or key in spec.userData does not exist.
	MachineUserDataNotFoundReason = "UserDataNotFound"

	// MachineReconcileErrorReason: an unexpected error; the message carries it.
	MachineReconcileErrorReason = "ReconcileError"
)
