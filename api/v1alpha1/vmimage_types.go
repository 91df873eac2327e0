package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GuestAgent is the guest configuration agent an image runs at first boot.
// +kubebuilder:validation:Enum=cloud-init;ignition;sysprep;none
type GuestAgent string

const (
	// GuestAgentCloudInit is cloud-init.
	GuestAgentCloudInit GuestAgent = "cloud-init"
	// GuestAgentIgnition is Ignition.
	GuestAgentIgnition GuestAgent = "ignition"
	// GuestAgentSysprep is Windows sysprep.
	GuestAgentSysprep GuestAgent = "sysprep"
	// GuestAgentNone means the image reads no user-data.
	GuestAgentNone GuestAgent = "none"
)

// ImageSourceKind is how an image source is found on a backend.
// +kubebuilder:validation:Enum=Template;BackingFile;Url
type ImageSourceKind string

const (
	// ImageSourceTemplate is a template on the backend (a vSphere or Proxmox template).
	ImageSourceTemplate ImageSourceKind = "Template"
	// ImageSourceBackingFile is an existing volume or file on the backend.
	ImageSourceBackingFile ImageSourceKind = "BackingFile"
	// ImageSourceURL is a disk image that the provider downloads and imports.
	ImageSourceURL ImageSourceKind = "Url"
)

// VMImageSpec describes an operating-system image and where each backend class finds it.
type VMImageSpec struct {
	// osFamily is the operating-system family, e.g. linux or windows.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	OSFamily string `json:"osFamily,omitempty"`

	// osDistribution is the distribution, e.g. ubuntu.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	OSDistribution string `json:"osDistribution,omitempty"`

	// osVersion is the distribution's version, e.g. 22.04.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	OSVersion string `json:"osVersion,omitempty"`

	// architecture is the CPU architecture, e.g. amd64 or arm64.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Architecture string `json:"architecture,omitempty"`

	// guestAgent is the first-boot agent that reads the VM's user-data.
	// +optional
	// +default="cloud-init"
	GuestAgent GuestAgent `json:"guestAgent,omitempty"`

	// sources say where each provider class finds this image; a VM with this image can only
	// be placed on a Provider whose class has a source here.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Sources []ImageSource `json:"sources,omitempty"`
}

// ImageSource is where one provider class finds an image.
//
// +kubebuilder:validation:XValidation:rule="self.kind != 'Url' || has(self.importFrom)",message="a Url source needs importFrom, the http or https URL to import the image from"
// +kubebuilder:validation:XValidation:rule="self.kind != 'Url' || !has(self.ref) || (self.ref.matches('^[A-Za-z0-9][-A-Za-z0-9_.]*$') && !self.ref.contains('..'))",message="a Url source's ref is the name the image is imported as (letters, digits, '-', '_' and '.'), never a URL or a path; put the URL in importFrom",fieldPath=".ref"
// +kubebuilder:validation:XValidation:rule="self.kind == 'Url' || has(self.ref)",message="a Template or BackingFile source needs ref"
// +kubebuilder:validation:XValidation:rule="!has(self.importFrom) || (isURL(self.importFrom) && url(self.importFrom).getScheme() in ['http', 'https'] && size(url(self.importFrom).getHostname()) != 0)",message="importFrom must be an http or https URL with a host, e.g. https://images.example.com/jammy.qcow2",fieldPath=".importFrom"
// +kubebuilder:validation:XValidation:rule="!has(self.importFrom) || (!self.importFrom.matches('^[^:/?#]+://[^/?#]*@'))",message="importFrom must not contain a user name or password (user:password@host); serve the image from a URL that needs no credentials in it",fieldPath=".importFrom"
// +kubebuilder:validation:XValidation:rule="!has(self.importFrom) || (!self.importFrom.matches('(?i)^[^:/?#]+://([^/?#]*@)?(169[.]254[.][0-9]+[.][0-9]+(:[0-9]*)?([/?#]|$)|[[]fe[89ab][0-9a-f]:)'))",message="importFrom must not name a link-local address (169.254.0.0/16 or fe80::/10), where cloud metadata endpoints live; import from an image server",fieldPath=".importFrom"
// +kubebuilder:validation:XValidation:rule="!has(self.importFrom) || ((!self.importFrom.matches('(?i)^[^:/?#]+://([^/?#]*@)?(0x[0-9a-f]*|[0-9]+)([.](0x[0-9a-f]*|[0-9]+))*[.]?(:[0-9]*)?([/?#]|$)') || self.importFrom.matches('(?i)^[^:/?#]+://([^/?#]*@)?(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.](25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.](25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.](25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(:[0-9]*)?([/?#]|$)')) && !self.importFrom.matches('(?i)^[^:/?#]+://([^/?#]*@)?[[]([^]/?#]*[.%]|[0:]*ffff:)'))",message="importFrom's host must be a DNS name or an IP address in its usual form, e.g. 192.0.2.10 or [2001:db8::10], without a zone",fieldPath=".importFrom"
type ImageSource struct {
	// providerClass is the provider class this source is for, e.g. vsphere.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	ProviderClass string `json:"providerClass,omitempty"`

	// kind is how the backend finds the image: Template, BackingFile or Url.
	// +required
	Kind ImageSourceKind `json:"kind,omitempty"`

	// ref names the image on the backend: a template name, ID or inventory path, a volume
	// or path, or, for a Url source, the name the image is imported as (never its URL).
	// It never has '..' path segments.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)[.][.](/|$)') && !self.matches('[[:cntrl:]]')",message="ref must not contain '..' path segments or control characters"
	Ref string `json:"ref,omitempty"`

	// importFrom is an http(s) URL the provider imports the image from when ref is missing
	// on the backend. It has no user name or password in it, and its host is not a
	// link-local address (where cloud metadata endpoints live); a loopback host is
	// refused at import time unless the Provider allows it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	ImportFrom string `json:"importFrom,omitempty"`

	// checksum is the image's digest as "sha256:<hex>" or "sha512:<hex>", checked after import.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=135
	// +kubebuilder:validation:XValidation:rule="self.matches('^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$')",message="checksum must be sha256:<64 lowercase hex digits> or sha512:<128 lowercase hex digits>"
	Checksum string `json:"checksum,omitempty"`
}

// ImageProviderStatus is one Provider's view of an image. Each provider writes only its
// own rows, with its own server-side-apply field manager.
type ImageProviderStatus struct {
	// providerNamespace is the namespace of the Provider this row is for.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	ProviderNamespace string `json:"providerNamespace,omitempty"`

	// providerName is the name of the Provider this row is for.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ProviderName string `json:"providerName,omitempty"`

	// ready is true when VMs can be made from the image on this Provider, false when
	// they cannot (yet).
	// +required
	Ready *bool `json:"ready,omitempty"`

	// resolvedRef is the backend's own reference to the image, e.g. a template's managed object ID.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	ResolvedRef string `json:"resolvedRef,omitempty"`

	// reason is a CamelCase word saying why the image is not ready.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// message says, for a person, why the image is not ready or how an import is going.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message,omitempty"`
}

// VMImageStatus is the image's readiness on each Provider.
//
// +kubebuilder:validation:MinProperties=1
type VMImageStatus struct {
	// conditions are the image's conditions.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type" protobuf:"bytes,1,rep,name=conditions"`

	// perProvider has one row for each Provider that has looked at this image.
	// +optional
	// +listType=map
	// +listMapKey=providerNamespace
	// +listMapKey=providerName
	PerProvider []ImageProviderStatus `json:"perProvider,omitempty"`
}

// VMImage is an operating-system image that VirtualMachines refer to, with its source on
// each backend class.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=vmimg,categories=banlieue
// +kubebuilder:printcolumn:name="OS",type=string,JSONPath=`.spec.osDistribution`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.osVersion`
// +kubebuilder:printcolumn:name="Arch",type=string,JSONPath=`.spec.architecture`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VMImage struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the image and its sources.
	// +required
	Spec VMImageSpec `json:"spec,omitempty,omitzero"`

	// status is the image's readiness on each Provider.
	// +optional
	Status VMImageStatus `json:"status,omitempty,omitzero"`
}

// VMImageList is a list of VMImages.
//
// +kubebuilder:object:root=true
type VMImageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VMImage `json:"items"`
}

// SourceFor returns the image's source for a provider class, or nil when it has none.
func (i *VMImage) SourceFor(providerClass string) *ImageSource {
	for k := range i.Spec.Sources {
		if i.Spec.Sources[k].ProviderClass == providerClass {
			return &i.Spec.Sources[k]
		}
	}
	return nil
}

// ProviderStatus returns the image's row for a Provider, or nil when it has none.
func (i *VMImage) ProviderStatus(namespace, name string) *ImageProviderStatus {
	for k := range i.Status.PerProvider {
		r := &i.Status.PerProvider[k]
		if r.ProviderNamespace == namespace && r.ProviderName == name {
			return r
		}
	}
	return nil
}

func init() { objectTypes = append(objectTypes, &VMImage{}, &VMImageList{}) }
