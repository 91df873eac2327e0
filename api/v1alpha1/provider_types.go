package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ProviderSpec is one backend instance: a vCenter, a libvirt host or a Proxmox VE cluster.
type ProviderSpec struct {
	// providerClassRef names the provider class (vsphere, libvirt, proxmox or a third
	// party's) whose provider controller claims this Provider.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="providerClassRef is immutable; create a new Provider for another backend"
	ProviderClassRef LocalObjectReference `json:"providerClassRef,omitempty,omitzero"`

	// connection says how the provider controller reaches the backend.
	// +required
	Connection Connection `json:"connection,omitempty,omitzero"`

	// capabilities declare the storage and network classes this backend offers and how
	// each maps onto backend objects, plus the features it has; leave them out rather
	// than empty.
	// +optional
	Capabilities Capabilities `json:"capabilities,omitempty,omitzero"`

	// parameters are backend defaults such as datacenter, folder, storage pool or node,
	// interpreted by the provider controller.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Parameters map[string]string `json:"parameters,omitempty"`

	// namespaceSelector limits the namespaces whose VMs may be placed here; all when unset.
	// +optional
	NamespaceSelector *LabelSelector `json:"namespaceSelector,omitempty"`

	// adoptionPolicy says whether VirtualMachines may take over existing backend VMs of
	// this Provider (spec.adoptProviderID): Disabled (the default) or Enabled. Enable it
	// only where the tenants its namespaceSelector admits may manage every VM the
	// Provider's credentials reach.
	// +optional
	// +default="Disabled"
	AdoptionPolicy AdoptionPolicy `json:"adoptionPolicy,omitempty"`

	// orphanPolicy says what the provider controller does with the backend VMs that
	// status.orphans reports: Report (the default) only counts them; Delete also deletes
	// those marked by this cluster that two orphan scans in a row found, never a VM whose
	// mark names another cluster or none (one made before marks named the cluster).
	// +optional
	// +default="Report"
	OrphanPolicy OrphanPolicy `json:"orphanPolicy,omitempty"`

	// paused stops both the core controller from placing new VMs here and the provider
	// controller from acting on this Provider's machines; unset means false.
	// +optional
	Paused *bool `json:"paused,omitempty"`
}

// AdoptionPolicy says whether a Provider's existing backend VMs may be adopted.
// +kubebuilder:validation:Enum=Disabled;Enabled
type AdoptionPolicy string

const (
	// AdoptionPolicyDisabled refuses every adoption: the default.
	AdoptionPolicyDisabled AdoptionPolicy = "Disabled"
	// AdoptionPolicyEnabled lets VirtualMachines adopt the Provider's unmanaged VMs.
	AdoptionPolicyEnabled AdoptionPolicy = "Enabled"
)

// OrphanPolicy says what becomes of a Provider's orphaned backend VMs.
// +kubebuilder:validation:Enum=Report;Delete
type OrphanPolicy string

const (
	// OrphanPolicyReport counts orphaned VMs in status.orphans and deletes none: the
	// default.
	OrphanPolicyReport OrphanPolicy = "Report"
	// OrphanPolicyDelete deletes the orphaned VMs this cluster marked, once two orphan
	// scans in a row have found them.
	OrphanPolicyDelete OrphanPolicy = "Delete"
)

// ProviderOperation is an operation beyond create, update and delete that a Provider's
// driver supports.
// +kubebuilder:validation:Enum=Adopt;Retain;ListVMs;ReportOrphans
type ProviderOperation string

const (
	// ProviderOperationAdopt says VirtualMachines may adopt the backend's existing VMs
	// (spec.adoptProviderID), where spec.adoptionPolicy allows it.
	ProviderOperationAdopt ProviderOperation = "Adopt"
	// ProviderOperationRetain says a VirtualMachine deleted under deletionPolicy Retain leaves
	// its backend VM running. Without it such a VM is held with RetainNotSupported.
	ProviderOperationRetain ProviderOperation = "Retain"
	// ProviderOperationListVMs says `banlieue adopt` can list the backend's unmanaged VMs.
	ProviderOperationListVMs ProviderOperation = "ListVMs"
	// ProviderOperationReportOrphans says status.orphans is reported, and
	// spec.orphanPolicy Delete acts.
	ProviderOperationReportOrphans ProviderOperation = "ReportOrphans"
)

// Connection is how a provider controller reaches its backend.
// +kubebuilder:validation:XValidation:rule="!has(self.endpoint) || (!self.endpoint.matches('^([^:/?#]+://)?[^/?#]*:[^/?#]*@'))",message="connection.endpoint must not contain credentials (user:password@); put them in the Secret named by credentialsRef",fieldPath=".endpoint"
// +kubebuilder:validation:XValidation:rule="!has(self.endpoint) || (!self.endpoint.matches('^(?i)https?://[^/?#]*@'))",message="connection.endpoint must not contain credentials (user@) in an http or https URL; put them in the Secret named by credentialsRef",fieldPath=".endpoint"
type Connection struct {
	// endpoint is the backend's address: a vCenter URL, a libvirt URI or a Proxmox API URL.
	// It never holds a password, nor for http(s) any user name: credentials belong in the
	// Secret named by credentialsRef. A libvirt URI may name the SSH user, as in
	// qemu+ssh://user@host/system.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Endpoint string `json:"endpoint,omitempty"`

	// credentialsRef names the Secret, in the Provider's namespace, holding the credentials;
	// its keys depend on the provider class.
	// +optional
	CredentialsRef LocalObjectReference `json:"credentialsRef,omitempty,omitzero"`

	// insecureSkipTLSVerify turns off verification of the backend's certificate; unset
	// means false. Use it only for test backends.
	// +optional
	InsecureSkipTLSVerify *bool `json:"insecureSkipTLSVerify,omitempty"`

	// caBundle is the PEM bundle that the backend's certificate is verified against.
	// +optional
	CABundle *CABundle `json:"caBundle,omitempty"`
}

// CABundle is a PEM certificate bundle given in exactly one way.
//
// +kubebuilder:validation:XValidation:rule="[has(self.inline), has(self.configMapRef), has(self.secretRef)].filter(x, x).size() == 1",message="caBundle must set exactly one of inline, configMapRef or secretRef"
type CABundle struct {
	// inline is the PEM bundle itself.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=262144
	Inline string `json:"inline,omitempty"`

	// configMapRef names a ConfigMap key, in the Provider's namespace, holding the bundle.
	// +optional
	ConfigMapRef KeyReference `json:"configMapRef,omitempty,omitzero"`

	// secretRef names a Secret key, in the Provider's namespace, holding the bundle.
	// +optional
	SecretRef KeyReference `json:"secretRef,omitempty,omitzero"`
}

// Capabilities are what a backend offers to VMs.
//
// +kubebuilder:validation:MinProperties=1
type Capabilities struct {
	// storageClasses map the storage classes VM classes ask for onto backend storage.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(c, self.filter(d, d.name == c.name).size() == 1)",message="storage class names must be unique"
	// +listType=atomic
	StorageClasses []ClassMapping `json:"storageClasses,omitempty"`

	// networkClasses map the network classes VM classes ask for onto backend networks.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(c, self.filter(d, d.name == c.name).size() == 1)",message="network class names must be unique"
	// +listType=atomic
	NetworkClasses []ClassMapping `json:"networkClasses,omitempty"`

	// features are what the backend supports, e.g. efiSecureBoot or nestedVirtualization.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	Features []string `json:"features,omitempty"`
}

// ClassMapping maps a backend-neutral class name onto backend objects.
type ClassMapping struct {
	// name is the class name VM classes use, e.g. fast-ssd or prod-net.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`

	// target is the backend's objects for the class, e.g. {datastore: ds-ssd-01}; it is
	// copied to each infrastructure machine so a provider never reads VM classes.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	Target map[string]string `json:"target,omitempty"`
}

// MachineKind is the infrastructure machine kind that core creates for a Provider.
type MachineKind struct {
	// apiGroup is the kind's API group, e.g. infrastructure.banlieue.io.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIGroup string `json:"apiGroup,omitempty"`

	// version is the kind's API version, e.g. v1alpha1.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Version string `json:"version,omitempty"`

	// kind is the kind, e.g. VSphereMachine.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind,omitempty"`
}

// IsDefined reports whether the machine kind is set.
func (k MachineKind) IsDefined() bool { return k.Kind != "" }

// FailureDomain is a part of a backend that fails independently: a compute cluster, a
// host, a Proxmox node.
type FailureDomain struct {
	// name identifies the failure domain within its Provider.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// labels are matched by VMs' placement.failureDomainSelector and anti-affinity topology keys.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// attributes say what is available in this failure domain; left out when the
	// provider reports nothing.
	// +optional
	Attributes FailureDomainAttributes `json:"attributes,omitempty,omitzero"`
}

// FailureDomainAttributes say what a failure domain offers. A nil list means the provider
// does not report it, and placement then trusts the Provider's capabilities.
//
// +kubebuilder:validation:MinProperties=1
type FailureDomainAttributes struct {
	// availableStorageClasses are the storage classes whose targets exist here.
	// +optional
	// +listType=set
	AvailableStorageClasses []string `json:"availableStorageClasses,omitempty"`

	// availableNetworkClasses are the network classes whose targets exist here.
	// +optional
	// +listType=set
	AvailableNetworkClasses []string `json:"availableNetworkClasses,omitempty"`

	// features are the features available here.
	// +optional
	// +listType=set
	Features []string `json:"features,omitempty"`

	// raw holds backend-specific facts, e.g. datacenter and cluster paths.
	// +optional
	Raw map[string]string `json:"raw,omitempty"`
}

// ProviderStatus is written only by the provider controller that claims the Provider's class.
//
// +kubebuilder:validation:MinProperties=1
type ProviderStatus struct {
	// conditions are Ready, BackendReachable and CredentialsValid.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type" protobuf:"bytes,1,rep,name=conditions"`

	// machineKind is the infrastructure machine kind that core creates for VMs placed here.
	// +optional
	MachineKind MachineKind `json:"machineKind,omitempty,omitzero"`

	// failureDomains are the parts of the backend that VMs can be placed in.
	// +optional
	// +listType=map
	// +listMapKey=name
	FailureDomains []FailureDomain `json:"failureDomains,omitempty"`

	// failureDomainSummary is the Failure domains column of `kubectl get providers`:
	// the first names in failureDomains, then how many more there are, e.g.
	// "dc1-c1, dc1-c2, dc1-c3 (+2 more)". It names the few failure domains most backends
	// have and stays narrow for many: at most three names in 64 characters, a longer first
	// name cut with "…". The provider controller writes it with failureDomains; it is
	// unset when there are none.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	FailureDomainSummary string `json:"failureDomainSummary,omitempty"`

	// providerIDPrefix is what the provider ID of every VM of this Provider starts with,
	// e.g. libvirt://kvm-01/ or proxmox://pve-a/; core places a VirtualMachine that
	// adopts a backend VM on the Provider whose prefix starts its adoptProviderID. The
	// provider controller writes it when its driver can adopt VMs; it is unset otherwise.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	ProviderIDPrefix string `json:"providerIDPrefix,omitempty"`

	// supportedOperations are the operations beyond create, update and delete that the
	// Provider's driver supports, as the provider controller found it built; unset when
	// it supports none. A restart (spec.restartRequestedAt) is not listed: whether it
	// can be confirmed depends on each VM, and a VM whose boot the backend cannot tell
	// says so itself (restart result Unsupported).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	SupportedOperations []ProviderOperation `json:"supportedOperations,omitempty"`

	// orphans reports the backend VMs that carry a banlieue machine's identity mark but
	// belong to no machine of the Provider's kind in any namespace, as the provider
	// controller last found them (every few minutes, for a driver that can list its
	// marked VMs). It is unset when there are none or the driver cannot list them. It is
	// a report, unless spec.orphanPolicy is Delete.
	// +optional
	Orphans ProviderOrphans `json:"orphans,omitempty,omitzero"`

	// observedGeneration is the generation the provider controller last reconciled.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ProviderOrphans counts a Provider's orphaned backend VMs and names the first of them.
type ProviderOrphans struct {
	// count is the number of orphaned VMs found on the backend; orphans is unset when
	// there is none.
	// +required
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count,omitempty"`

	// vms are the first orphaned VMs, at most 5, by providerID.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	VMs []OrphanedVM `json:"vms,omitempty"`
}

// OrphanedVM is one backend VM whose machine is gone.
type OrphanedVM struct {
	// providerID is the VM's provider ID, as a machine's spec.providerID would hold it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// name is the VM's name on the backend.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name,omitempty"`

	// machine is the machine the VM's mark names: <namespace>/<name>/<uid>, or the UID
	// alone when the mark names no namespace and name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Machine string `json:"machine,omitempty"`
}

// Provider is one backend instance that VMs can be placed on.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=prov,categories=banlieue
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.providerClassRef.name`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.connection.endpoint`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Failure domains",type=string,JSONPath=`.status.failureDomainSummary`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Provider struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says which backend this is and how to reach it.
	// +required
	Spec ProviderSpec `json:"spec,omitempty,omitzero"`

	// status is written by the provider controller of the Provider's class.
	// +optional
	Status ProviderStatus `json:"status,omitempty,omitzero"`
}

// ProviderList is a list of Providers.
//
// +kubebuilder:object:root=true
type ProviderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Provider `json:"items"`
}

// StorageClass returns the Provider's mapping for a storage class, or nil.
func (p *Provider) StorageClass(name string) *ClassMapping {
	return findClass(p.Spec.Capabilities.StorageClasses, name)
}

// Namespaces parses the namespaceSelector: the namespaces the Provider admits, every one
// when it is unset.
func (p *Provider) Namespaces() (labels.Selector, error) {
	if p.Spec.NamespaceSelector == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(p.Spec.NamespaceSelector.AsMetav1())
}

// FailureDomain returns the failure domain name the Provider publishes in its status,
// or nil.
func (p *Provider) FailureDomain(name string) *FailureDomain {
	for i := range p.Status.FailureDomains {
		if p.Status.FailureDomains[i].Name == name {
			return &p.Status.FailureDomains[i]
		}
	}
	return nil
}

// NetworkClass returns the Provider's mapping for a network class, or nil.
func (p *Provider) NetworkClass(name string) *ClassMapping {
	return findClass(p.Spec.Capabilities.NetworkClasses, name)
}

func findClass(classes []ClassMapping, name string) *ClassMapping {
	for i := range classes {
		if classes[i].Name == name {
			return &classes[i]
		}
	}
	return nil
}

func init() { objectTypes = append(objectTypes, &Provider{}, &ProviderList{}) }
