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
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)[.][.](/|$)') && !self.matches('[[:cntrl:]]')",message="must be a vSphere inventory path or name, without '..' path segments or control characters"
	Datacenter string `json:"datacenter,omitempty"`

	// folder is the VM folder the VM is created in.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)[.][.](/|$)') && !self.matches('[[:cntrl:]]')",message="must be a vSphere inventory path or name, without '..' path segments or control characters"
	Folder string `json:"folder,omitempty"`

	// resourcePool is the resource pool the VM runs in.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)[.][.](/|$)') && !self.matches('[[:cntrl:]]')",message="must be a vSphere inventory path or name, without '..' path segments or control characters"
	ResourcePool string `json:"resourcePool,omitempty"`

	// datastore overrides the boot disk's storage-class target.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)[.][.](/|$)') && !self.matches('[[:cntrl:]]')",message="must be a vSphere inventory path or name, without '..' path segments or control characters"
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
	// storagePool overrides the boot disk's storage-class target pool; a libvirt pool
	// name, never a path.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9][-A-Za-z0-9_.+]*$')",message="storagePool must be a libvirt storage pool name: letters, digits, '-', '_', '.' and '+', starting with a letter or digit, never a path"
	StoragePool string `json:"storagePool,omitempty"`

	// machineType is the QEMU machine type, e.g. q35 or pc-q35-8.2.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9][-A-Za-z0-9_.]*$')",message="machineType must be a QEMU machine type such as q35 or pc-q35-8.2: letters, digits, '-', '_' and '.'"
	MachineType string `json:"machineType,omitempty"`

	// cpuMode is the libvirt CPU mode: host-passthrough, host-model, maximum or custom.
	// +optional
	// +kubebuilder:validation:Enum=host-passthrough;host-model;maximum;custom
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
	// node overrides the failure domain's node; a Proxmox VE node name.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$')",message="node must be a Proxmox VE node name: letters, digits and '-', starting and ending with a letter or digit"
	Node string `json:"node,omitempty"`

	// pool is the Proxmox resource pool the VM joins, e.g. tenants or tenants/web for a
	// nested pool.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*){0,2}$')",message="pool must be a Proxmox VE pool ID: letters, digits, '-', '_' and '.', at most three levels separated by '/', no segment starting with '.'"
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
