package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LocalObjectReference names an object in the same namespace, or a cluster-scoped object.
type LocalObjectReference struct {
	// name of the referenced object, an RFC 1123 subdomain as every object name is.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="must be a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit (RFC 1123 subdomain)"
	Name string `json:"name,omitempty"`
}

// IsDefined reports whether the reference is set.
func (r LocalObjectReference) IsDefined() bool { return r.Name != "" }

// KeyReference names one key of a ConfigMap or Secret in the referring object's namespace.
type KeyReference struct {
	// name of the ConfigMap or Secret, an RFC 1123 subdomain.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="must be a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit (RFC 1123 subdomain)"
	Name string `json:"name,omitempty"`

	// key within the ConfigMap or Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$') && self != '.' && !self.startsWith('..')",message="must be a Secret or ConfigMap key: letters, digits, '-', '_' and '.', not '.' and not starting with '..'"
	Key string `json:"key,omitempty"`
}

// IsDefined reports whether the key reference is set.
func (r KeyReference) IsDefined() bool { return r.Name != "" }

// LabelSelector is a Kubernetes label selector (the same shape as metav1.LabelSelector)
// whose expressions the API server checks, so a selector that cannot match anything
// because it is malformed is rejected when it is written rather than when it is used.
//
// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="matchExpressions operator must be one of In, NotIn, Exists, DoesNotExist"
// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="matchExpressions with operator In or NotIn must list at least one value"
// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="matchExpressions with operator Exists or DoesNotExist must not list values"
type LabelSelector struct {
	// matchLabels is a map of {key,value} pairs; each one must be present with that value.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	MatchLabels map[string]string `json:"matchLabels,omitempty"`

	// matchExpressions is a list of label selector requirements; all of them must hold.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorRequirement is one requirement of a LabelSelector.
type LabelSelectorRequirement struct {
	// key is the label key that the selector applies to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	Key string `json:"key,omitempty"`

	// operator is one of In, NotIn, Exists and DoesNotExist.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	Operator metav1.LabelSelectorOperator `json:"operator,omitempty"`

	// values are the label values for In and NotIn; empty for Exists and DoesNotExist.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Values []string `json:"values,omitempty"`
}

// AsMetav1 returns the selector as a metav1.LabelSelector, for labels.Selector conversion.
func (s *LabelSelector) AsMetav1() *metav1.LabelSelector {
	if s == nil {
		return nil
	}
	out := &metav1.LabelSelector{MatchLabels: s.MatchLabels}
	for _, e := range s.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: e.Key, Operator: e.Operator, Values: e.Values,
		})
	}
	return out
}

// PowerState is the power state of a virtual machine.
// +kubebuilder:validation:Enum=PoweredOn;PoweredOff;Suspended
type PowerState string

const (
	// PowerStatePoweredOn means the VM is running.
	PowerStatePoweredOn PowerState = "PoweredOn"
	// PowerStatePoweredOff means the VM is stopped.
	PowerStatePoweredOff PowerState = "PoweredOff"
	// PowerStateSuspended means the VM's memory is saved and it is not running.
	PowerStateSuspended PowerState = "Suspended"
)

// ObservedHardware is a VM's hardware as its backend reports it, which may differ from
// its class's: an adopted VM's shape, or a change that waits for the next restart.
// +kubebuilder:validation:MinProperties=1
type ObservedHardware struct {
	// cpus is the VM's virtual CPU count.
	// +optional
	// +kubebuilder:validation:Minimum=1
	CPUs int32 `json:"cpus,omitempty"`

	// memoryMiB is the VM's memory in MiB.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MemoryMiB int64 `json:"memoryMiB,omitempty"`

	// diskSizesGiB are the sizes of the VM's disks in bus order, in GiB rounded up; 0
	// where the backend does not tell.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	DiskSizesGiB []int64 `json:"diskSizesGiB,omitempty"`
}

// Firmware is the boot firmware of a virtual machine.
// +kubebuilder:validation:Enum=bios;efi;efi-secure
type Firmware string

const (
	// FirmwareBIOS boots with legacy BIOS.
	FirmwareBIOS Firmware = "bios"
	// FirmwareEFI boots with UEFI.
	FirmwareEFI Firmware = "efi"
	// FirmwareEFISecure boots with UEFI and Secure Boot; placement requires the efiSecureBoot feature.
	FirmwareEFISecure Firmware = "efi-secure"
)

// DiskProvisioning says how a disk's space is allocated on the backend.
// +kubebuilder:validation:Enum=thin;thick;eagerZeroed
type DiskProvisioning string

const (
	// DiskProvisioningThin allocates space as it is written.
	DiskProvisioningThin DiskProvisioning = "thin"
	// DiskProvisioningThick allocates all space up front.
	DiskProvisioningThick DiskProvisioning = "thick"
	// DiskProvisioningEagerZeroed allocates and zeroes all space up front.
	DiskProvisioningEagerZeroed DiskProvisioning = "eagerZeroed"
)

// IPAMSource says where an interface's address comes from.
// +kubebuilder:validation:Enum=dhcp;static;pool
type IPAMSource string

const (
	// IPAMSourceDHCP takes the address from DHCP on the attached network.
	IPAMSourceDHCP IPAMSource = "dhcp"
	// IPAMSourceStatic uses the addresses given in static.
	IPAMSourceStatic IPAMSource = "static"
	// IPAMSourcePool takes an address from the referenced pool.
	IPAMSourcePool IPAMSource = "pool"
)

// IPAM says how a network interface gets its addresses.
//
// +kubebuilder:validation:XValidation:rule="self.source != 'static' || has(self.static)",message="ipam.static is required when source is static"
// +kubebuilder:validation:XValidation:rule="self.source != 'pool' || has(self.pool)",message="ipam.pool is required when source is pool"
// +kubebuilder:validation:XValidation:rule="self.source == 'static' || !has(self.static)",message="ipam.static may only be set when source is static"
// +kubebuilder:validation:XValidation:rule="self.source == 'pool' || !has(self.pool)",message="ipam.pool may only be set when source is pool"
type IPAM struct {
	// source is where the address comes from: dhcp (the default), static or pool.
	// +optional
	// +default="dhcp"
	Source IPAMSource `json:"source,omitempty"`

	// static holds the addresses of a statically configured interface.
	// +optional
	Static StaticIPAM `json:"static,omitempty,omitzero"`

	// pool names the address pool to allocate from.
	// +optional
	Pool PoolIPAM `json:"pool,omitempty,omitzero"`
}

// StaticIPAM is a statically configured interface.
type StaticIPAM struct {
	// addresses are the interface's addresses in CIDR notation, e.g. 10.0.0.5/24.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.all(a, isCIDR(a))",message="static addresses must be in CIDR notation, e.g. 10.0.0.5/24"
	// +listType=atomic
	Addresses []string `json:"addresses,omitempty"`

	// gateway is the default gateway's address.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="gateway must be an IP address"
	Gateway string `json:"gateway,omitempty"`

	// nameservers are the DNS servers' addresses.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.all(a, isIP(a))",message="nameservers must be IP addresses"
	// +listType=atomic
	Nameservers []string `json:"nameservers,omitempty"`
}

// IsDefined reports whether the static configuration is set.
func (s StaticIPAM) IsDefined() bool { return len(s.Addresses) > 0 }

// PoolIPAM names an address pool.
type PoolIPAM struct {
	// poolRef names the pool to allocate an address from.
	// +required
	PoolRef LocalObjectReference `json:"poolRef,omitempty,omitzero"`
}

// IsDefined reports whether the pool is set.
func (p PoolIPAM) IsDefined() bool { return p.PoolRef.IsDefined() }

// MachineAddressType is the kind of a machine address, as in Cluster API.
// +kubebuilder:validation:Enum=Hostname;ExternalIP;InternalIP;ExternalDNS;InternalDNS
type MachineAddressType string

const (
	// MachineHostName is the machine's host name.
	MachineHostName MachineAddressType = "Hostname"
	// MachineExternalIP is an address reachable from outside the machine's network.
	MachineExternalIP MachineAddressType = "ExternalIP"
	// MachineInternalIP is an address on the machine's own network.
	MachineInternalIP MachineAddressType = "InternalIP"
	// MachineExternalDNS is a DNS name reachable from outside the machine's network.
	MachineExternalDNS MachineAddressType = "ExternalDNS"
	// MachineInternalDNS is a DNS name on the machine's own network.
	MachineInternalDNS MachineAddressType = "InternalDNS"
)

// MachineAddress is one address of a machine.
type MachineAddress struct {
	// type is the kind of address.
	// +required
	Type MachineAddressType `json:"type,omitempty"`

	// address is the address itself.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Address string `json:"address,omitempty"`
}

// UserDataSecretType is the Secret type that marks a Secret as a guest's first-boot
// payload. Only a Secret of this type (or of ClusterAPIBootstrapSecretType) is handed to a
// guest: whoever may create a VM in a namespace must not be able to copy any other Secret
// of it into a guest they control.
const UserDataSecretType = "banlieue.io/user-data" //nolint:gosec // a Secret type, not a credential

// ClusterAPIBootstrapSecretType is the type of the bootstrap data Secrets Cluster API's
// bootstrap providers write; they are usable as user data too.
const ClusterAPIBootstrapSecretType = "cluster.x-k8s.io/secret" //nolint:gosec // a Secret type, not a credential

// UserData references the cloud-init, Ignition or sysprep payload handed to the guest as is.
type UserData struct {
	// secretRef names the Secret, in the VM's namespace, that holds the payload; the
	// Secret's type must be banlieue.io/user-data (or Cluster API's cluster.x-k8s.io/secret).
	// +required
	SecretRef LocalObjectReference `json:"secretRef,omitempty,omitzero"`

	// key is the Secret's key that holds the payload; "user-data" by default.
	// +optional
	// +default="user-data"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$') && self != '.' && !self.startsWith('..')",message="must be a Secret or ConfigMap key: letters, digits, '-', '_' and '.', not '.' and not starting with '..'"
	Key string `json:"key,omitempty"`
}

// IsDefined reports whether the user data is set.
func (u UserData) IsDefined() bool { return u.SecretRef.IsDefined() }

// Initialization reports the one-time steps of bringing a VM up.
//
// +kubebuilder:validation:MinProperties=1
type Initialization struct {
	// provisioned is true once the backend VM exists and has been configured.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}
