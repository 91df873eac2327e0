package v1alpha1

// VSphereCloneMode is how a vSphere VM is cloned from its template.
// +kubebuilder:validation:Enum=full;linked
type VSphereCloneMode string

// VSphereOptions are vSphere-specific options of a VSphereMachine; each overrides the
// Provider's parameters for this machine.
type VSphereOptions struct {
	// datacenter is the datacenter's inventory path or name.
	// +optional
	// +kubebuilder:validation:MinLength=1
	Datacenter string `json:"datacenter,omitempty"`

	// folder is the VM folder the VM is created in.
	// +optional
	// +kubebuilder:validation:MinLength=1
	Folder string `json:"folder,omitempty"`

	// resourcePool is the resource pool the VM runs in.
	// +optional
	// +kubebuilder:validation:MinLength=1
	ResourcePool string `json:"resourcePool,omitempty"`

	// datastore overrides the boot disk's storage-class target.
	// +optional
	// +kubebuilder:validation:MinLength=1
	Datastore string `json:"datastore,omitempty"`

	// cloneMode is full (the default) or linked.
	// +optional
	CloneMode VSphereCloneMode `json:"cloneMode,omitempty"`
}

// VSphereStatus holds the vSphere references of a VM.
type VSphereStatus struct {
	// moRef is the VM's managed object reference, e.g. vm-42.
	// +optional
	// +kubebuilder:validation:MinLength=1
	MoRef string `json:"moRef,omitempty"`

	// instanceUUID is the VM's vCenter instance UUID.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=36
	InstanceUUID string `json:"instanceUUID,omitempty"`
}

// LibvirtOptions are libvirt-specific options of a LibvirtMachine.
type LibvirtOptions struct {
	// storagePool overrides the boot disk's storage-class target pool.
	// +optional
	// +kubebuilder:validation:MinLength=1
	StoragePool string `json:"storagePool,omitempty"`

	// machineType is the QEMU machine type, e.g. q35.
	// +optional
	// +kubebuilder:validation:MinLength=1
	MachineType string `json:"machineType,omitempty"`

	// cpuMode is the libvirt CPU mode, e.g. host-passthrough.
	// +optional
	// +kubebuilder:validation:MinLength=1
	CPUMode string `json:"cpuMode,omitempty"`
}

// LibvirtStatus holds the libvirt references of a VM.
type LibvirtStatus struct {
	// domainUUID is the libvirt domain's UUID.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=36
	DomainUUID string `json:"domainUUID,omitempty"`

	// domainName is the libvirt domain's name.
	// +optional
	// +kubebuilder:validation:MinLength=1
	DomainName string `json:"domainName,omitempty"`

	// volumes are the storage volumes this machine created, deleted with it.
	// +optional
	// +listType=atomic
	Volumes []string `json:"volumes,omitempty"`
}

// ProxmoxCloneMode is how a Proxmox VM is cloned from its template.
// +kubebuilder:validation:Enum=full;linked
type ProxmoxCloneMode string

// ProxmoxOptions are Proxmox-specific options of a ProxmoxMachine.
type ProxmoxOptions struct {
	// node overrides the failure domain's node.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Node string `json:"node,omitempty"`

	// pool is the Proxmox resource pool the VM joins.
	// +optional
	// +kubebuilder:validation:MinLength=1
	Pool string `json:"pool,omitempty"`

	// cloneMode is full (the default) or linked.
	// +optional
	CloneMode ProxmoxCloneMode `json:"cloneMode,omitempty"`
}

// ProxmoxStatus holds the Proxmox references of a VM.
type ProxmoxStatus struct {
	// node is the node the VM runs on.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Node string `json:"node,omitempty"`

	// vmid is the VM's ID, from 100 as in Proxmox VE.
	// +optional
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=999999999
	VMID int32 `json:"vmid,omitempty"`
}
