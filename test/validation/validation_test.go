package validation

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// invalidCase is a manifest the API server must reject.
type invalidCase struct {
	// name says, as a sentence, what is wrong with the manifest.
	name string
	// before, when set, is a valid object created first; manifest is then sent as an
	// update of it, for the rules that compare an object with its old self.
	before string
	// manifest is the bad object.
	manifest string
	// want is a substring the rejection's message must contain.
	want string
}

// baseVM (named with baseVMNamed) and baseProvider are the valid objects the update
// cases start from.
const (
	baseVM = `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: %s
spec:
  classRef:
    name: small
  imageRef:
    name: ubuntu-22-04
`
	baseProvider = `
apiVersion: banlieue.io/v1alpha1
kind: Provider
metadata:
  name: immutable-class
spec:
  providerClassRef:
    name: vsphere
  connection:
    endpoint: https://vcenter.example.com/sdk
`
)

var invalidCases = []invalidCase{
	// VirtualMachine
	{
		name: "A VirtualMachine without classRef is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: no-class
spec:
  imageRef:
    name: ubuntu-22-04
`,
		want: "spec.classRef: Required value",
	},
	{
		name: "A VirtualMachine with neither imageRef nor adoptProviderID is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: no-image
spec:
  classRef:
    name: small
`,
		want: "imageRef is required, unless the VM adopts an existing backend VM with adoptProviderID",
	},
	{
		name: "A VirtualMachine whose classRef has an empty name is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: empty-class
spec:
  classRef:
    name: ""
  imageRef:
    name: ubuntu-22-04
`,
		want: "spec.classRef.name in body should be at least 1 chars long",
	},
	{
		name: "A VirtualMachine whose imageRef has an empty name is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: empty-image
spec:
  classRef:
    name: small
  imageRef:
    name: ""
`,
		want: "spec.imageRef.name in body should be at least 1 chars long",
	},
	{
		name: "A VirtualMachine whose classRef has no name at all is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: nameless-class
spec:
  classRef: {}
  imageRef:
    name: ubuntu-22-04
`,
		want: "spec.classRef.name: Required value",
	},
	{
		name: "A VirtualMachine with an unknown desiredPowerState is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: bad-power
spec:
  classRef:
    name: small
  imageRef:
    name: ubuntu-22-04
  desiredPowerState: Hibernated
`,
		want: `spec.desiredPowerState: Unsupported value: "Hibernated": supported values: "PoweredOn", "PoweredOff", "Suspended"`,
	},
	{
		name: "A VirtualMachine with an unknown migrationPolicy is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: bad-migration
spec:
  classRef:
    name: small
  imageRef:
    name: ubuntu-22-04
  migrationPolicy: sometimes
`,
		want: `spec.migrationPolicy: Unsupported value: "sometimes": supported values: "automatic", "manual", "never"`,
	},
	{
		name: "An anti-affinity term with an unknown mode is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: bad-anti-affinity
spec:
  classRef:
    name: small
  imageRef:
    name: ubuntu-22-04
  placement:
    antiAffinity:
    - topologyKey: host
      labelSelector:
        matchLabels: {app: db}
      mode: mandatory
`,
		want: `spec.placement.antiAffinity[0].mode: Unsupported value: "mandatory": supported values: "required", "preferred"`,
	},
	{
		name: "An anti-affinity term without a topologyKey is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: no-topology-key
spec:
  classRef:
    name: small
  imageRef:
    name: ubuntu-22-04
  placement:
    antiAffinity:
    - labelSelector:
        matchLabels: {app: db}
`,
		want: "spec.placement.antiAffinity[0].topologyKey: Required value",
	},
	{
		name: "A provider selector with an unknown operator is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: bad-operator
spec:
  classRef:
    name: small
  imageRef:
    name: ubuntu-22-04
  placement:
    providerSelector:
      matchExpressions:
      - key: env
        operator: Equals
        values: [prod]
`,
		want: "matchExpressions operator must be one of In, NotIn, Exists, DoesNotExist",
	},
	{
		name: "A provider selector using In without values is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: in-without-values
spec:
  classRef:
    name: small
  imageRef:
    name: ubuntu-22-04
  placement:
    providerSelector:
      matchExpressions:
      - key: env
        operator: In
`,
		want: "matchExpressions with operator In or NotIn must list at least one value",
	},
	{
		name: "A failure-domain selector using NotIn with an empty value list is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: notin-empty-values
spec:
  classRef:
    name: small
  imageRef:
    name: ubuntu-22-04
  placement:
    failureDomainSelector:
      matchExpressions:
      - key: zone
        operator: NotIn
        values: []
`,
		want: "matchExpressions with operator In or NotIn must list at least one value",
	},
	{
		name: "An anti-affinity selector using Exists with values is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: exists-with-values
spec:
  classRef:
    name: small
  imageRef:
    name: ubuntu-22-04
  placement:
    antiAffinity:
    - topologyKey: host
      labelSelector:
        matchExpressions:
        - key: app
          operator: Exists
          values: [db]
`,
		want: "matchExpressions with operator Exists or DoesNotExist must not list values",
	},
	{
		name: "A VirtualMachine whose userData names no Secret is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: userdata-no-secret
spec:
  classRef:
    name: small
  imageRef:
    name: ubuntu-22-04
  userData:
    key: user-data
`,
		want: "spec.userData.secretRef: Required value",
	},
	{
		name:     "A VirtualMachine whose classUpdatePolicy is neither Pinned nor Follow is rejected.",
		manifest: baseVMNamed("class-update-always") + "  classUpdatePolicy: Always\n",
		want:     `spec.classUpdatePolicy: Unsupported value: "Always": supported values: "Pinned", "Follow"`,
	},
	{
		name:     "A VirtualMachine's classUpdatePolicy in lower case is rejected.",
		before:   baseVMNamed("class-update-lower"),
		manifest: baseVMNamed("class-update-lower") + "  classUpdatePolicy: follow\n",
		want:     `spec.classUpdatePolicy: Unsupported value: "follow"`,
	},
	{
		name:     "A VirtualMachine whose deletionPolicy is neither Delete nor Retain is rejected.",
		manifest: baseVMNamed("deletion-orphan") + "  deletionPolicy: Orphan\n",
		want:     `spec.deletionPolicy: Unsupported value: "Orphan": supported values: "Delete", "Retain"`,
	},
	{
		name:     "A VirtualMachine's deletionPolicy in lower case is rejected.",
		before:   baseVMNamed("deletion-lower"),
		manifest: baseVMNamed("deletion-lower") + "  deletionPolicy: retain\n",
		want:     `spec.deletionPolicy: Unsupported value: "retain"`,
	},
	{
		name:     "A machine whose deletionPolicy is neither Delete nor Retain is rejected.",
		manifest: machine("LibvirtMachine", "deletion-orphan", "", "  deletionPolicy: Orphan\n"),
		want:     `spec.deletionPolicy: Unsupported value: "Orphan": supported values: "Delete", "Retain"`,
	},
	{
		name:     "A VirtualMachine that adopts a VM without migrationPolicy never is rejected.",
		manifest: adoptingVM("adopt-migrates", "vsphere://4214a4ef-0000-0000-0000-000000000001", ""),
		want:     "an adopted VM cannot be recreated elsewhere: set migrationPolicy to never",
	},
	{
		name:     "A VirtualMachine that adopts a VM with userData is rejected.",
		manifest: adoptingVM("adopt-userdata", "vsphere://4214a4ef-0000-0000-0000-000000000001", "  migrationPolicy: never\n  userData:\n    secretRef:\n      name: ud\n"),
		want:     "an adopted VM has booted already; userData is only for VMs banlieue creates",
	},
	{
		name:     "A VirtualMachine whose adoptProviderID is no provider ID is rejected.",
		manifest: adoptingVM("adopt-garbage", "4214a4ef 0000", "  migrationPolicy: never\n"),
		want:     "adoptProviderID must be a provider ID such as vsphere://<uuid>, libvirt://<host>/<uuid> or proxmox://<cluster>/<vmid>",
	},
	{
		name:     "Changing a VirtualMachine's adoptProviderID is rejected.",
		before:   adoptingVM("adopt-change", "proxmox://pve-a/101", "  migrationPolicy: never\n"),
		manifest: adoptingVM("adopt-change", "proxmox://pve-a/102", "  migrationPolicy: never\n"),
		want:     "adoptProviderID is set when the VirtualMachine is created and cannot be added, changed or removed",
	},
	{
		name:     "Adding adoptProviderID to a VirtualMachine is rejected.",
		before:   replaceOnce(baseVMNamed("adopt-add"), "spec:\n", "spec:\n  migrationPolicy: never\n"),
		manifest: replaceOnce(baseVMNamed("adopt-add"), "spec:\n", "spec:\n  migrationPolicy: never\n  adoptProviderID: proxmox://pve-a/101\n"),
		want:     "adoptProviderID is set when the VirtualMachine is created and cannot be added, changed or removed",
	},
	{
		name:     "A Provider whose adoptionPolicy is neither Disabled nor Enabled is rejected.",
		manifest: baseProvider + "  adoptionPolicy: Always\n",
		want:     `spec.adoptionPolicy: Unsupported value: "Always": supported values: "Disabled", "Enabled"`,
	},
	{
		name:     "Changing a VirtualMachine's imageRef is rejected as immutable.",
		before:   baseVMNamed("change-image"),
		manifest: replaceOnce(baseVMNamed("change-image"), "name: ubuntu-22-04", "name: ubuntu-24-04"),
		want:     "imageRef is immutable; create a new VirtualMachine to change the image",
	},
	{
		name:     "Moving a VirtualMachine's restartRequestedAt backwards is rejected.",
		before:   baseVMNamed("restart-backwards") + "  restartRequestedAt: \"2026-12-04T10:00:00Z\"\n",
		manifest: baseVMNamed("restart-backwards") + "  restartRequestedAt: \"2026-12-04T09:00:00Z\"\n",
		want:     "restartRequestedAt only moves forward; set it to the current time to ask for a restart",
	},
	{
		name:     "Removing a VirtualMachine's restartRequestedAt is rejected.",
		before:   baseVMNamed("restart-removed") + "  restartRequestedAt: \"2026-12-04T10:00:00Z\"\n",
		manifest: baseVMNamed("restart-removed"),
		want:     "restartRequestedAt only moves forward; set it to the current time to ask for a restart",
	},

	// VMClass
	{
		name: "A VMClass with zero CPUs is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: zero-cpus
spec:
  hardware:
    cpus: 0
    memoryMiB: 1024
`,
		want: "spec.hardware.cpus in body should be greater than or equal to 1",
	},
	{
		name: "A VMClass with less than 128 MiB of memory is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: tiny-memory
spec:
  hardware:
    cpus: 1
    memoryMiB: 64
`,
		want: "spec.hardware.memoryMiB in body should be greater than or equal to 128",
	},
	{
		name: "A VMClass without hardware is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: no-hardware
spec:
  firmware: efi
`,
		want: "spec.hardware: Required value",
	},
	{
		name: "A disk of size zero is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: zero-disk
spec:
  hardware:
    cpus: 2
    memoryMiB: 2048
    disks:
    - name: root
      sizeGiB: 0
      storageClass: fast-ssd
`,
		want: "spec.hardware.disks[0].sizeGiB in body should be greater than or equal to 1",
	},
	{
		name: "A disk larger than 64 TiB is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: huge-disk
spec:
  hardware:
    cpus: 2
    memoryMiB: 2048
    disks:
    - name: root
      sizeGiB: 65537
      storageClass: fast-ssd
`,
		want: "spec.hardware.disks[0].sizeGiB in body should be less than or equal to 65536",
	},
	{
		name: "Two disks with the same name are rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: duplicate-disks
spec:
  hardware:
    cpus: 2
    memoryMiB: 2048
    disks:
    - name: data
      sizeGiB: 10
      storageClass: fast-ssd
    - name: data
      sizeGiB: 20
      storageClass: fast-ssd
`,
		want: "disk names must be unique",
	},
	{
		name: "A disk with an empty name is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: empty-disk-name
spec:
  hardware:
    cpus: 2
    memoryMiB: 2048
    disks:
    - name: ""
      sizeGiB: 10
      storageClass: fast-ssd
`,
		want: "spec.hardware.disks[0].name in body should be at least 1 chars long",
	},
	{
		name: "A disk with an unknown provisioning is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: bad-provisioning
spec:
  hardware:
    cpus: 2
    memoryMiB: 2048
    disks:
    - name: root
      sizeGiB: 10
      storageClass: fast-ssd
      provisioning: lazy
`,
		want: `spec.hardware.disks[0].provisioning: Unsupported value: "lazy": supported values: "thin", "thick", "eagerZeroed"`,
	},
	{
		name: "A VMClass with an unknown firmware is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: bad-firmware
spec:
  hardware:
    cpus: 2
    memoryMiB: 2048
  firmware: uefi
`,
		want: `spec.firmware: Unsupported value: "uefi": supported values: "bios", "efi", "efi-secure"`,
	},
	{
		name: "Two interfaces with the same name are rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: duplicate-interfaces
spec:
  hardware:
    cpus: 2
    memoryMiB: 2048
  network:
    interfaces:
    - name: eth0
      networkClass: prod-net
    - name: eth0
      networkClass: backup-net
`,
		want: "interface names must be unique",
	},
	{
		name: "An interface with static IPAM but no static block is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: static-without-block
spec:
  hardware:
    cpus: 2
    memoryMiB: 2048
  network:
    interfaces:
    - name: eth0
      networkClass: prod-net
      ipam:
        source: static
`,
		want: "ipam.static is required when source is static",
	},
	{
		name: "An interface with pool IPAM but no pool is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: pool-without-block
spec:
  hardware:
    cpus: 2
    memoryMiB: 2048
  network:
    interfaces:
    - name: eth0
      networkClass: prod-net
      ipam:
        source: pool
`,
		want: "ipam.pool is required when source is pool",
	},
	{
		name: "An interface with DHCP and a static block is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: dhcp-with-static
spec:
  hardware:
    cpus: 2
    memoryMiB: 2048
  network:
    interfaces:
    - name: eth0
      networkClass: prod-net
      ipam:
        source: dhcp
        static:
          addresses: [10.0.0.5/24]
`,
		want: "ipam.static may only be set when source is static",
	},
	{
		name: "A static address that is not in CIDR notation is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: static-not-cidr
spec:
  hardware:
    cpus: 2
    memoryMiB: 2048
  network:
    interfaces:
    - name: eth0
      networkClass: prod-net
      ipam:
        source: static
        static:
          addresses: [10.0.0.5]
`,
		want: "static addresses must be in CIDR notation, e.g. 10.0.0.5/24",
	},
	{
		name: "A static gateway that is not an IP address is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: static-bad-gateway
spec:
  hardware:
    cpus: 2
    memoryMiB: 2048
  network:
    interfaces:
    - name: eth0
      networkClass: prod-net
      ipam:
        source: static
        static:
          addresses: [10.0.0.5/24]
          gateway: router.example.com
`,
		want: "gateway must be an IP address",
	},
	{
		name: "An interface with an unknown IPAM source is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: bad-ipam-source
spec:
  hardware:
    cpus: 2
    memoryMiB: 2048
  network:
    interfaces:
    - name: eth0
      networkClass: prod-net
      ipam:
        source: bootp
`,
		want: `spec.network.interfaces[0].ipam.source: Unsupported value: "bootp": supported values: "dhcp", "static", "pool"`,
	},
	{
		name: "An interface MTU below 576 is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: small-mtu
spec:
  hardware:
    cpus: 2
    memoryMiB: 2048
  network:
    interfaces:
    - name: eth0
      networkClass: prod-net
      mtu: 100
`,
		want: "spec.network.interfaces[0].mtu in body should be greater than or equal to 576",
	},

	// VMImage
	{
		name: "A VMImage with no sources is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: no-sources
spec:
  osFamily: linux
`,
		want: "spec.sources: Required value",
	},
	{
		name: "A VMImage with an empty source list is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: empty-sources
spec:
  osFamily: linux
  sources: []
`,
		want: "spec.sources: Invalid value: 0: spec.sources in body should have at least 1 items",
	},
	{
		name: "A VMImage with an unknown guestAgent is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: bad-agent
spec:
  guestAgent: puppet
  sources:
  - providerClass: vsphere
    kind: Template
    ref: ubuntu-22.04-template
`,
		want: `spec.guestAgent: Unsupported value: "puppet": supported values: "cloud-init", "ignition", "sysprep", "none"`,
	},
	{
		name: "An image source with an unknown kind is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: bad-source-kind
spec:
  sources:
  - providerClass: vsphere
    kind: ISO
    ref: ubuntu.iso
`,
		want: `spec.sources[0].kind: Unsupported value: "ISO": supported values: "Template", "BackingFile", "Url"`,
	},
	{
		name: "An image source without a providerClass is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: no-provider-class
spec:
  sources:
  - kind: Template
    ref: ubuntu-22.04-template
`,
		want: "spec.sources[0].providerClass: Required value",
	},
	{
		name: "An image source importing from an ftp URL is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: ftp-import
spec:
  sources:
  - providerClass: libvirt
    kind: Url
    importFrom: ftp://images.example.com/jammy.qcow2
`,
		want: "importFrom must be an http or https URL",
	},
	{
		name: "An image source importing from something that is not a URL is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: not-a-url-import
spec:
  sources:
  - providerClass: libvirt
    kind: Url
    importFrom: jammy.qcow2
`,
		want: "importFrom must be an http or https URL",
	},
	{
		name: "An image source importing from an https URL without a host is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: hostless-import
spec:
  sources:
  - providerClass: libvirt
    kind: Url
    importFrom: "https:jammy.qcow2"
`,
		want: "importFrom must be an http or https URL",
	},
	{
		name: "An image source importing from a bare https:// is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: bare-scheme-import
spec:
  sources:
  - providerClass: libvirt
    kind: Url
    importFrom: "https://"
`,
		want: "importFrom must be an http or https URL",
	},
	{
		name: "An image source with an md5 checksum is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: md5-checksum
spec:
  sources:
  - providerClass: libvirt
    kind: Url
    importFrom: https://images.example.com/jammy.qcow2
    checksum: md5:d41d8cd98f00b204e9800998ecf8427e
`,
		want: "checksum must be sha256:<64 lowercase hex digits> or sha512:<128 lowercase hex digits>",
	},
	{
		name: "An image source with a truncated sha256 checksum is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: short-checksum
spec:
  sources:
  - providerClass: libvirt
    kind: Url
    importFrom: https://images.example.com/jammy.qcow2
    checksum: sha256:abcdef
`,
		want: "checksum must be sha256:<64 lowercase hex digits> or sha512:<128 lowercase hex digits>",
	},
	{
		name: "A Template source without ref is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: template-no-ref
spec:
  sources:
  - providerClass: vsphere
    kind: Template
`,
		want: "a Template or BackingFile source needs ref",
	},
	{
		name: "A Url source without importFrom is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: url-no-location
spec:
  sources:
  - providerClass: libvirt
    kind: Url
`,
		want: "a Url source needs importFrom, the http or https URL to import the image from",
	},

	// Provider
	{
		name: "A Provider without an endpoint is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: Provider
metadata:
  name: no-endpoint
spec:
  providerClassRef:
    name: vsphere
  connection:
    credentialsRef:
      name: vcenter-credentials
`,
		want: "spec.connection.endpoint: Required value",
	},
	{
		name: "A Provider with an empty endpoint is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: Provider
metadata:
  name: empty-endpoint
spec:
  providerClassRef:
    name: vsphere
  connection:
    endpoint: ""
`,
		want: "spec.connection.endpoint in body should be at least 1 chars long",
	},
	{
		name: "A Provider without providerClassRef is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: Provider
metadata:
  name: no-class
spec:
  connection:
    endpoint: https://vcenter.example.com/sdk
`,
		want: "spec.providerClassRef: Required value",
	},
	{
		name: "A caBundle with no source is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: Provider
metadata:
  name: ca-none
spec:
  providerClassRef:
    name: vsphere
  connection:
    endpoint: https://vcenter.example.com/sdk
    caBundle: {}
`,
		want: "caBundle must set exactly one of inline, configMapRef or secretRef",
	},
	{
		name: "A caBundle with both an inline bundle and a ConfigMap is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: Provider
metadata:
  name: ca-two
spec:
  providerClassRef:
    name: vsphere
  connection:
    endpoint: https://vcenter.example.com/sdk
    caBundle:
      inline: |
        -----BEGIN CERTIFICATE-----
        MIIB
        -----END CERTIFICATE-----
      configMapRef:
        name: vcenter-ca
        key: ca.crt
`,
		want: "caBundle must set exactly one of inline, configMapRef or secretRef",
	},
	{
		name: "A caBundle whose only source is an empty inline bundle is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: Provider
metadata:
  name: ca-empty-inline
spec:
  providerClassRef:
    name: vsphere
  connection:
    endpoint: https://vcenter.example.com/sdk
    caBundle:
      inline: ""
`,
		want: "spec.connection.caBundle.inline in body should be at least 1 chars long",
	},
	{
		name: "A caBundle secretRef without a key is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: Provider
metadata:
  name: ca-secret-no-key
spec:
  providerClassRef:
    name: vsphere
  connection:
    endpoint: https://vcenter.example.com/sdk
    caBundle:
      secretRef:
        name: vcenter-ca
`,
		want: "spec.connection.caBundle.secretRef.key: Required value",
	},
	{
		name: "Two storage classes with the same name are rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: Provider
metadata:
  name: duplicate-storage
spec:
  providerClassRef:
    name: vsphere
  connection:
    endpoint: https://vcenter.example.com/sdk
  capabilities:
    storageClasses:
    - name: fast-ssd
      target: {datastore: ds-1}
    - name: fast-ssd
      target: {datastore: ds-2}
`,
		want: "storage class names must be unique",
	},
	{
		name: "A namespace selector with an unknown operator is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: Provider
metadata:
  name: bad-namespace-selector
spec:
  providerClassRef:
    name: vsphere
  connection:
    endpoint: https://vcenter.example.com/sdk
  namespaceSelector:
    matchExpressions:
    - key: team
      operator: Matches
      values: [db]
`,
		want: "matchExpressions operator must be one of In, NotIn, Exists, DoesNotExist",
	},
	{
		name:     "Changing a Provider's providerClassRef is rejected as immutable.",
		before:   baseProvider,
		manifest: replaceOnce(baseProvider, "name: vsphere", "name: libvirt"),
		want:     "providerClassRef is immutable; create a new Provider for another backend",
	},
}

// TestInvalidManifestsAreRejected sends each bad manifest to the API server and checks
// that it is refused with a message that says what is wrong.
func TestInvalidManifestsAreRejected(t *testing.T) {
	needAPIServer(t)
	for _, tc := range invalidCases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t) })
	}
	if len(invalidCases) < 25 {
		t.Errorf("only %d invalid manifests; the suite promises at least 25", len(invalidCases))
	}
}

// run sends the case's manifest, as a create or as an update of before, and checks that
// the API server refuses it with the case's message.
func (tc invalidCase) run(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	ctx := testContext(t)
	obj := fromYAML(t, tc.manifest)

	var err error
	if tc.before == "" {
		err = k8sClient.Create(ctx, obj)
	} else {
		old := fromYAML(t, tc.before)
		g.Expect(k8sClient.Create(ctx, old)).To(Succeed(), "the object before the update must be valid")
		deleteAtCleanup(t, old)
		obj.SetResourceVersion(old.GetResourceVersion())
		err = k8sClient.Update(ctx, obj)
	}
	if err == nil {
		deleteAtCleanup(t, obj)
	}
	g.Expect(err).To(HaveOccurred(), "the API server accepted:\n%s", tc.manifest)
	g.Expect(err.Error()).To(ContainSubstring(tc.want))
}

// seedVM is the VirtualMachine from the original project's product page, as published.
const seedVM = `apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: db-prod-01
spec:
  classRef:
    name: db-prod-large
  imageRef:
    name: ubuntu-22-04
  placement:
    providerSelector:
      matchLabels: { dc: dc1, env: prod }
`

// TestSeedManifestAppliesUnchanged checks that the original project's VirtualMachine
// manifest is accepted as published and gets the documented defaults.
func TestSeedManifestAppliesUnchanged(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := testContext(t)

	obj := fromYAML(t, seedVM)
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	deleteAtCleanup(t, obj)

	got := getLike(t, obj)
	g.Expect(nested(got, "spec", "classRef", "name")).To(Equal("db-prod-large"))
	g.Expect(nested(got, "spec", "imageRef", "name")).To(Equal("ubuntu-22-04"))
	g.Expect(nested(got, "spec", "placement", "providerSelector", "matchLabels")).
		To(Equal(map[string]any{"dc": "dc1", "env": "prod"}))
	g.Expect(nested(got, "spec", "desiredPowerState")).To(Equal("PoweredOn"))
	g.Expect(nested(got, "spec", "migrationPolicy")).To(Equal("automatic"))
}

// Full manifests of every banlieue.io kind, with every spec field that DESIGN.md names.
const (
	fullVMClass = `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: db-prod-large
spec:
  hardware:
    cpus: 8
    memoryMiB: 32768
    disks:
    - name: root
      sizeGiB: 100
      storageClass: fast-ssd
      provisioning: thin
    - name: data
      sizeGiB: 500
      storageClass: fast-ssd
      provisioning: eagerZeroed
    - name: logs
      sizeGiB: 50
      storageClass: bulk
  network:
    interfaces:
    - name: eth0
      networkClass: prod-net
      ipam:
        source: static
        static:
          addresses: [10.0.0.5/24, "2001:db8::5/64"]
          gateway: 10.0.0.1
          nameservers: [10.0.0.53, "2001:db8::53"]
      mtu: 9000
    - name: eth1
      networkClass: backup-net
      ipam:
        source: pool
        pool:
          poolRef:
            name: backup-pool
    - name: eth2
      networkClass: mgmt-net
      ipam:
        source: dhcp
    - name: eth3
      networkClass: mgmt-net
  firmware: efi-secure
  features: [efiSecureBoot, nestedVirtualization]
`
	fullVMImage = `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: ubuntu-22-04
spec:
  osFamily: linux
  osDistribution: ubuntu
  osVersion: "22.04"
  architecture: amd64
  guestAgent: cloud-init
  sources:
  - providerClass: vsphere
    kind: Template
    ref: /dc1/vm/templates/ubuntu-22.04
  - providerClass: libvirt
    kind: Url
    importFrom: https://images.example.com/jammy/current/jammy-server-cloudimg-amd64.img
    checksum: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  - providerClass: proxmox
    kind: BackingFile
    ref: local:iso/jammy.qcow2
    importFrom: http://images.example.com/jammy.qcow2
    checksum: sha512:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
`
	fullProvider = `
apiVersion: banlieue.io/v1alpha1
kind: Provider
metadata:
  name: vcenter-dc1
  labels: {dc: dc1, env: prod}
spec:
  providerClassRef:
    name: vsphere
  connection:
    endpoint: https://vcenter.dc1.example.com/sdk
    credentialsRef:
      name: vcenter-dc1-credentials
    insecureSkipTLSVerify: false
    caBundle:
      configMapRef:
        name: vcenter-dc1-ca
        key: ca.crt
  capabilities:
    storageClasses:
    - name: fast-ssd
      target: {datastore: ds-ssd-01}
    - name: bulk
      target: {datastore: ds-hdd-01, storagePolicy: bronze}
    networkClasses:
    - name: prod-net
      target: {portgroup: dvpg-prod}
    - name: backup-net
      target: {portgroup: dvpg-backup}
    features: [efiSecureBoot, nestedVirtualization]
  parameters:
    datacenter: dc1
    folder: /dc1/vm/banlieue
    resourcePool: /dc1/host/cluster-a/Resources
  namespaceSelector:
    matchLabels: {tenant: databases}
    matchExpressions:
    - key: env
      operator: In
      values: [prod, staging]
    - key: quarantined
      operator: DoesNotExist
  paused: false
`
	fullVM = `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: db-prod-02
  labels: {app: db}
spec:
  classRef:
    name: db-prod-large
  imageRef:
    name: ubuntu-22-04
  placement:
    providerSelector:
      matchLabels: {dc: dc1}
      matchExpressions:
      - key: env
        operator: NotIn
        values: [dev]
    failureDomainSelector:
      matchExpressions:
      - key: zone
        operator: Exists
    antiAffinity:
    - topologyKey: host
      labelSelector:
        matchLabels: {app: db}
      mode: required
    - topologyKey: provider
      labelSelector:
        matchExpressions:
        - key: app
          operator: In
          values: [db]
      mode: preferred
  desiredPowerState: PoweredOff
  userData:
    secretRef:
      name: db-prod-02-cloud-init
    key: cloud-config
  migrationPolicy: manual
  paused: true
`
)

// TestFullManifestsAreAccepted checks that manifests using every field of each kind
// are accepted, and that the fields they leave out get their documented defaults.
func TestFullManifestsAreAccepted(t *testing.T) {
	needAPIServer(t)
	for _, tc := range []struct {
		name     string
		manifest string
		// defaults maps a dotted spec path to the value the API server must default it to.
		defaults map[string]any
	}{
		{
			name:     "A VMClass with every field is accepted and a disk without provisioning is thin.",
			manifest: fullVMClass,
			defaults: map[string]any{"spec.hardware.disks.2.provisioning": "thin"},
		},
		{
			name:     "A VMImage with every field and every source kind is accepted.",
			manifest: fullVMImage,
		},
		{
			name:     "A Provider with every field is accepted.",
			manifest: fullProvider,
		},
		{
			name:     "A VirtualMachine with every field is accepted.",
			manifest: fullVM,
		},
		{
			name: "A minimal VMClass gets bios firmware and interfaces without ipam stay DHCP by default.",
			manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: minimal
spec:
  hardware:
    cpus: 1
    memoryMiB: 128
  network:
    interfaces:
    - name: eth0
      networkClass: prod-net
      ipam: {}
`,
			defaults: map[string]any{
				"spec.firmware":                         "bios",
				"spec.network.interfaces.0.ipam.source": "dhcp",
			},
		},
		{
			name: "A minimal VMImage gets the cloud-init guest agent.",
			manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: minimal
spec:
  sources:
  - providerClass: vsphere
    kind: Template
    ref: ubuntu
`,
			defaults: map[string]any{"spec.guestAgent": "cloud-init"},
		},
		{
			name: "A VirtualMachine's userData key defaults to user-data and anti-affinity mode to required.",
			manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VirtualMachine
metadata:
  name: defaults
spec:
  classRef:
    name: small
  imageRef:
    name: ubuntu-22-04
  placement:
    antiAffinity:
    - topologyKey: host
      labelSelector:
        matchLabels: {app: web}
  userData:
    secretRef:
      name: web-cloud-init
`,
			defaults: map[string]any{
				"spec.userData.key":                  "user-data",
				"spec.placement.antiAffinity.0.mode": "required",
				"spec.desiredPowerState":             "PoweredOn",
				"spec.migrationPolicy":               "automatic",
				"spec.classUpdatePolicy":             "Pinned",
				"spec.deletionPolicy":                "Delete",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := testContext(t)
			obj := fromYAML(t, tc.manifest)
			g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
			deleteAtCleanup(t, obj)

			got := getLike(t, obj)
			for path, want := range tc.defaults {
				g.Expect(nestedPath(got, path)).To(Equal(want), "field %s", path)
			}
			// An accepted manifest must also be accepted again as an update of itself.
			g.Expect(k8sClient.Update(ctx, got)).To(Succeed())
		})
	}
}

// TestMachineCRDsCarryContractLabels reads the infrastructure CRDs back from the API
// server and checks the labels by which core and Cluster API recognise machine kinds.
func TestMachineCRDsCarryContractLabels(t *testing.T) {
	needAPIServer(t)
	kinds := []string{
		"vspheremachines", "vspheremachinetemplates",
		"libvirtmachines", "libvirtmachinetemplates",
		"proxmoxmachines", "proxmoxmachinetemplates",
	}
	for _, plural := range kinds {
		t.Run("The "+plural+" CRD carries the machine-contract labels.", func(t *testing.T) {
			g := NewWithT(t)
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
			key := client.ObjectKey{Name: plural + ".infrastructure.banlieue.io"}
			g.Expect(k8sClient.Get(testContext(t), key, crd)).To(Succeed())
			g.Expect(crd.GetLabels()).To(HaveKeyWithValue("banlieue.io/machine-contract", "v1alpha1"))
			g.Expect(crd.GetLabels()).To(HaveKeyWithValue("cluster.x-k8s.io/v1beta2", "v1alpha1"))
		})
	}
}

// baseVMNamed returns baseVM with the given name.
func baseVMNamed(name string) string { return fmt.Sprintf(baseVM, name) }

// adoptingVM is a VirtualMachine without an image that adopts the backend VM id, with
// extra appended to its spec.
func adoptingVM(name, id, extra string) string {
	return replaceOnce(baseVMNamed(name), "  imageRef:\n    name: ubuntu-22-04\n", "  adoptProviderID: "+id+"\n"+extra)
}

// replaceOnce replaces the first old in s with replacement, and panics when s has no
// old, so a case cannot silently send an unchanged object.
func replaceOnce(s, old, replacement string) string {
	if !strings.Contains(s, old) {
		panic(fmt.Sprintf("%q not found in manifest", old))
	}
	return strings.Replace(s, old, replacement, 1)
}

// getLike reads back the object that obj names, as the API server stored it.
func getLike(t *testing.T, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(obj.GroupVersionKind())
	if err := k8sClient.Get(testContext(t), client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatalf("reading back %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
	return got
}

// nested returns the value at fields in obj, or nil when there is none.
func nested(obj *unstructured.Unstructured, fields ...string) any {
	var cur any = obj.Object
	for _, f := range fields {
		switch v := cur.(type) {
		case map[string]any:
			cur = v[f]
		case []any:
			var i int
			if _, err := fmt.Sscanf(f, "%d", &i); err != nil || i < 0 || i >= len(v) {
				return nil
			}
			cur = v[i]
		default:
			return nil
		}
	}
	return cur
}

// nestedPath is nested with a dotted path, in which numbers index lists: spec.disks.0.name.
func nestedPath(obj *unstructured.Unstructured, path string) any {
	return nested(obj, strings.Split(path, ".")...)
}

// TestMutableFieldsCanBeUpdated checks that the immutability rules only pin the fields
// they name: everything else on a VirtualMachine or Provider, classRef included, can
// still be edited.
func TestMutableFieldsCanBeUpdated(t *testing.T) {
	needAPIServer(t)
	for _, tc := range []struct {
		name, before, after string
	}{
		{
			name:   "A VirtualMachine's power state, placement and migration policy can be changed.",
			before: baseVMNamed("mutable"),
			after: baseVMNamed("mutable") + `  desiredPowerState: Suspended
  migrationPolicy: never
  placement:
    providerSelector:
      matchLabels: {dc: dc2}
`,
		},
		{
			name:   "A VirtualMachine's classRef can be changed, which resizes it, and its classUpdatePolicy too.",
			before: baseVMNamed("resize"),
			after:  replaceOnce(baseVMNamed("resize"), "name: small", "name: large") + "  classUpdatePolicy: Follow\n",
		},
		{
			name:   "A VirtualMachine's deletionPolicy can be set to Retain and back to Delete.",
			before: baseVMNamed("retain") + "  deletionPolicy: Retain\n",
			after:  baseVMNamed("retain") + "  deletionPolicy: Delete\n",
		},
		{
			name:   "A machine's deletionPolicy can be changed.",
			before: machine("ProxmoxMachine", "retain", "", "  deletionPolicy: Delete\n"),
			after:  machine("ProxmoxMachine", "retain", "", "  deletionPolicy: Retain\n"),
		},
		{
			name:   "A VirtualMachine's restartRequestedAt can be set, then moved forward.",
			before: baseVMNamed("restart-forward") + "  restartRequestedAt: \"2026-12-04T10:00:00Z\"\n",
			after:  baseVMNamed("restart-forward") + "  restartRequestedAt: \"2026-12-04T10:00:01Z\"\n",
		},
		{
			name:   "A VirtualMachine's restartRequestedAt can be added.",
			before: baseVMNamed("restart-added"),
			after:  baseVMNamed("restart-added") + "  restartRequestedAt: \"2026-12-04T10:00:00Z\"\n",
		},
		{
			name:   "A Provider's endpoint and capabilities can be changed.",
			before: baseProvider,
			after: replaceOnce(baseProvider, "https://vcenter.example.com/sdk", "https://vcenter2.example.com/sdk") + `  capabilities:
    features: [efiSecureBoot]
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := testContext(t)
			old := fromYAML(t, tc.before)
			g.Expect(k8sClient.Create(ctx, old)).To(Succeed())
			deleteAtCleanup(t, old)
			obj := fromYAML(t, tc.after)
			obj.SetResourceVersion(old.GetResourceVersion())
			g.Expect(k8sClient.Update(ctx, obj)).To(Succeed())
		})
	}
}
