package validation

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// machine returns a valid infrastructure machine of kind, named name, whose spec has the
// given image block (indented under spec.image) and extra spec lines appended; the rows
// about tenants' machines start from it.
func machine(kind, name, image, extra string) string {
	if image == "" {
		image = "    name: ubuntu-22-04\n    kind: Template\n    ref: ubuntu-2204-tpl\n"
	}
	return fmt.Sprintf(`
apiVersion: infrastructure.banlieue.io/v1alpha1
kind: %s
metadata:
  name: %s
spec:
  providerRef:
    namespace: infra
    name: backend-1
  image:
%s  hardware:
    cpus: 2
    memoryMiB: 2048
%s`, kind, name, image, extra)
}

// urlImage returns a VMImage named name with one Url source for libvirt whose extra
// lines (indented under the source) are given.
func urlImage(name, source string) string {
	return fmt.Sprintf(`
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: %s
spec:
  sources:
  - providerClass: libvirt
    kind: Url
%s`, name, source)
}

// provider returns a valid Provider named name whose connection has the given lines
// (indented under connection).
func provider(name, connection string) string {
	return fmt.Sprintf(`
apiVersion: banlieue.io/v1alpha1
kind: Provider
metadata:
  name: %s
spec:
  providerClassRef:
    name: vsphere
  connection:
%s`, name, connection)
}

// The API server's messages for the rules these rows check.
const (
	objectNameMessage    = "must be a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit (RFC 1123 subdomain)"
	namespaceNameMessage = "must be a namespace name: lowercase letters, digits and '-', starting and ending with a letter or digit (RFC 1123 label)"
	keyMessage           = "must be a Secret or ConfigMap key: letters, digits, '-', '_' and '.', not '.' and not starting with '..'"
	endpointPassword     = "connection.endpoint must not contain credentials (user:password@); put them in the Secret named by credentialsRef"
	endpointUser         = "connection.endpoint must not contain credentials (user@) in an http or https URL; put them in the Secret named by credentialsRef"
	importHTTPOnly       = "importFrom must be an http or https URL with a host, e.g. https://images.example.com/jammy.qcow2"
	importUserinfo       = "importFrom must not contain a user name or password (user:password@host); serve the image from a URL that needs no credentials in it"
	importLinkLocal      = "importFrom must not name a link-local address (169.254.0.0/16 or fe80::/10), where cloud metadata endpoints live; import from an image server"
	importHostForm       = "importFrom's host must be a DNS name or an IP address in its usual form, e.g. 192.0.2.10 or [2001:db8::10], without a zone"
	urlRefName           = "a Url source's ref is the name the image is imported as (letters, digits, '-', '_' and '.'), never a URL or a path; put the URL in importFrom"
	refPath              = "ref must not contain '..' path segments or control characters"
	vspherePath          = "must be a vSphere inventory path or name, without '..' path segments or control characters"
)

// referenceCases are the tenancy rules of the API: every object name is one, no URL
// carries credentials or points at a cloud metadata endpoint, and no path separator or
// traversal reaches a backend through an infrastructure machine.
var referenceCases = []invalidCase{
	// Object references.
	{
		name:     "A VirtualMachine whose classRef is not a lowercase name is rejected.",
		manifest: replaceOnce(baseVMNamed("upper-class"), "name: small", "name: Small"),
		want:     `spec.classRef.name: Invalid value: "Small": ` + objectNameMessage,
	},
	{
		name:     "A VirtualMachine whose imageRef is a relative path is rejected.",
		manifest: replaceOnce(baseVMNamed("path-image"), "name: ubuntu-22-04", "name: ../ubuntu-22-04"),
		want:     `spec.imageRef.name: Invalid value: "../ubuntu-22-04": ` + objectNameMessage,
	},
	{
		name: "A VirtualMachine whose user-data Secret name is a path into another namespace is rejected.",
		manifest: baseVMNamed("path-secret") + `  userData:
    secretRef:
      name: ../kube-system/bootstrap-token
`,
		want: `spec.userData.secretRef.name: Invalid value: "../kube-system/bootstrap-token": ` + objectNameMessage,
	},
	{
		name: "A VirtualMachine whose user-data key starts with '..' is rejected.",
		manifest: baseVMNamed("dotdot-key") + `  userData:
    secretRef:
      name: web-cloud-init
    key: ../token
`,
		want: `spec.userData.key: Invalid value: "../token": ` + keyMessage,
	},
	{
		name: "A Provider whose credentialsRef has an underscore and capitals is rejected.",
		manifest: provider("bad-credentials-ref", `    endpoint: https://vcenter.example.com/sdk
    credentialsRef:
      name: Vcenter_Credentials
`),
		want: `spec.connection.credentialsRef.name: Invalid value: "Vcenter_Credentials": ` + objectNameMessage,
	},
	{
		name: "A Provider whose providerClassRef has a slash is rejected.",
		manifest: replaceOnce(provider("slash-class", "    endpoint: https://vcenter.example.com/sdk\n"),
			"name: vsphere", "name: vsphere/v2"),
		want: `spec.providerClassRef.name: Invalid value: "vsphere/v2": ` + objectNameMessage,
	},
	{
		name: "A Provider whose CA bundle ConfigMap name has a space is rejected.",
		manifest: provider("spaced-ca", `    endpoint: https://vcenter.example.com/sdk
    caBundle:
      configMapRef:
        name: vcenter ca
        key: ca.crt
`),
		want: `spec.connection.caBundle.configMapRef.name: Invalid value: "vcenter ca": ` + objectNameMessage,
	},
	{
		name: "A Provider whose CA bundle Secret key is '..' is rejected.",
		manifest: provider("dotdot-ca-key", `    endpoint: https://vcenter.example.com/sdk
    caBundle:
      secretRef:
        name: vcenter-ca
        key: ..
`),
		want: `spec.connection.caBundle.secretRef.key: Invalid value: "..": ` + keyMessage,
	},
	{
		name: "A VMClass whose address pool name starts with a dash is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMClass
metadata:
  name: dash-pool
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
        pool:
          poolRef:
            name: -pool
`,
		want: `spec.network.interfaces[0].ipam.pool.poolRef.name: Invalid value: "-pool": ` + objectNameMessage,
	},
	{
		name:     "A machine whose Provider namespace has capitals is rejected.",
		manifest: replaceOnce(machine("ProxmoxMachine", "upper-namespace", "", ""), "namespace: infra", "namespace: Infra"),
		want:     `spec.providerRef.namespace: Invalid value: "Infra": ` + namespaceNameMessage,
	},
	{
		name:     "A machine whose Provider namespace has a dot is rejected: namespaces are labels, not subdomains.",
		manifest: replaceOnce(machine("VSphereMachine", "dotted-namespace", "", ""), "namespace: infra", "namespace: infra.prod"),
		want:     `spec.providerRef.namespace: Invalid value: "infra.prod": ` + namespaceNameMessage,
	},
	{
		name:     "A machine whose Provider name has an underscore is rejected.",
		manifest: replaceOnce(machine("LibvirtMachine", "underscore-provider", "", ""), "name: backend-1", "name: backend_1"),
		want:     `spec.providerRef.name: Invalid value: "backend_1": ` + objectNameMessage,
	},
	{
		name: "A machine whose user-data Secret name is a path is rejected.",
		manifest: machine("LibvirtMachine", "path-user-data", "", `  userData:
    secretRef:
      name: other-tenant/cloud-init
`),
		want: `spec.userData.secretRef.name: Invalid value: "other-tenant/cloud-init": ` + objectNameMessage,
	},
	{
		name:     "A machine whose image name has capitals is rejected.",
		manifest: machine("ProxmoxMachine", "upper-image", "    name: Ubuntu\n    kind: Template\n    ref: ubuntu-2204-tpl\n", ""),
		want:     `spec.image.name: Invalid value: "Ubuntu": ` + objectNameMessage,
	},

	// Provider endpoints.
	{
		name:     "A Provider endpoint with a user and password is rejected.",
		manifest: provider("endpoint-password", "    endpoint: https://administrator:hunter2@vcenter.example.com/sdk\n"),
		want:     endpointPassword,
	},
	{
		name:     "A libvirt endpoint with an SSH password is rejected.",
		manifest: provider("libvirt-password", "    endpoint: qemu+ssh://root:hunter2@kvm1.example.com/system\n"),
		want:     endpointPassword,
	},
	{
		name:     "A Provider endpoint with a password and no scheme is rejected.",
		manifest: provider("schemeless-password", "    endpoint: administrator:hunter2@vcenter.example.com\n"),
		want:     endpointPassword,
	},
	{
		name:     "An https Provider endpoint with a user name is rejected.",
		manifest: provider("https-user", "    endpoint: https://root@pve.example.com:8006/api2/json\n"),
		want:     endpointUser,
	},
	{
		name:     "An HTTP Provider endpoint with a user name, scheme in capitals, is rejected.",
		manifest: provider("http-user-caps", "    endpoint: HTTP://root@pve.example.com:8006\n"),
		want:     endpointUser,
	},

	// VMImage sources.
	{
		name:     "A Url source whose ref is the URL is rejected.",
		manifest: urlImage("url-ref-is-url", "    ref: https://images.example.com/jammy.qcow2\n    importFrom: https://images.example.com/jammy.qcow2\n"),
		want:     `spec.sources[0].ref: Invalid value: ` + urlRefName,
	},
	{
		name:     "A Url source whose ref is a path is rejected.",
		manifest: urlImage("url-ref-is-path", "    ref: images/jammy.qcow2\n    importFrom: https://images.example.com/jammy.qcow2\n"),
		want:     `spec.sources[0].ref: Invalid value: ` + urlRefName,
	},
	{
		name:     "A Url source whose ref has '..' is rejected.",
		manifest: urlImage("url-ref-dotdot", "    ref: jammy..qcow2\n    importFrom: https://images.example.com/jammy.qcow2\n"),
		want:     urlRefName,
	},
	{
		name:     "A Url source that names its URL only in ref is rejected.",
		manifest: urlImage("url-only-in-ref", "    ref: jammy\n"),
		want:     "a Url source needs importFrom, the http or https URL to import the image from",
	},
	{
		name:     "An image imported from a file URL is rejected.",
		manifest: urlImage("file-import", "    importFrom: file:///etc/shadow\n"),
		want:     importHTTPOnly,
	},
	{
		name:     "An image imported from a URL with a user and token is rejected.",
		manifest: urlImage("userinfo-import", "    importFrom: https://deploy:s3cr3t-token@images.example.com/jammy.qcow2\n"),
		want:     `spec.sources[0].importFrom: Invalid value: ` + importUserinfo,
	},
	{
		name:     "An image imported from a URL with a user name only is rejected.",
		manifest: urlImage("user-import", "    importFrom: http://deploy@images.example.com/jammy.qcow2\n"),
		want:     importUserinfo,
	},
	{
		name:     "An image imported from the cloud metadata address is rejected.",
		manifest: urlImage("metadata-import", "    importFrom: http://169.254.169.254/latest/meta-data/iam/security-credentials/\n"),
		want:     `spec.sources[0].importFrom: Invalid value: ` + importLinkLocal,
	},
	{
		name:     "An image imported from an IPv6 link-local address is rejected.",
		manifest: urlImage("fe80-import", "    importFrom: \"http://[fe80::a9fe:a9fe]/disk.qcow2\"\n"),
		want:     importLinkLocal,
	},
	{
		name:     "An image imported from an IPv6 link-local address with a zone is rejected.",
		manifest: urlImage("zone-import", "    importFrom: \"http://[fe80::1%25eth0]/disk.qcow2\"\n"),
		want:     importHostForm,
	},
	{
		name:     "An image imported from the metadata address written as one decimal number is rejected.",
		manifest: urlImage("decimal-import", "    importFrom: http://2852039166/latest/meta-data/\n"),
		want:     importHostForm,
	},
	{
		name:     "An image imported from the metadata address written in hex is rejected.",
		manifest: urlImage("hex-import", "    importFrom: http://0xa9fea9fe/latest/meta-data/\n"),
		want:     importHostForm,
	},
	{
		name:     "An image imported from the metadata address with a trailing dot is rejected.",
		manifest: urlImage("dot-import", "    importFrom: http://169.254.169.254./latest/meta-data/\n"),
		want:     importHostForm,
	},
	{
		name:     "An image imported from the metadata address mapped into IPv6 is rejected.",
		manifest: urlImage("mapped-import", "    importFrom: \"http://[::ffff:169.254.169.254]/latest/meta-data/\"\n"),
		want:     importHostForm,
	},
	{
		name: "A Template source whose inventory path climbs out with '..' is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: template-traversal
spec:
  sources:
  - providerClass: vsphere
    kind: Template
    ref: /dc1/vm/templates/../../../dc2/vm/tenant-b/db-01
`,
		want: `spec.sources[0].ref: Invalid value: "/dc1/vm/templates/../../../dc2/vm/tenant-b/db-01": ` + refPath,
	},
	{
		name: "A BackingFile source whose path climbs out with '..' is rejected.",
		manifest: `
apiVersion: banlieue.io/v1alpha1
kind: VMImage
metadata:
  name: backing-traversal
spec:
  sources:
  - providerClass: libvirt
    kind: BackingFile
    ref: /var/lib/libvirt/images/../../../../etc/shadow
`,
		want: refPath,
	},

	// The machine contract, for machines written directly.
	{
		name: "A machine imported from the cloud metadata address is rejected, as a VMImage is.",
		manifest: machine("ProxmoxMachine", "metadata-machine",
			"    name: ubuntu-22-04\n    kind: Url\n    importFrom: http://169.254.169.254/latest/user-data\n", ""),
		want: `spec.image.importFrom: Invalid value: ` + importLinkLocal,
	},
	{
		name: "A machine imported from a URL with credentials is rejected, as a VMImage is.",
		manifest: machine("LibvirtMachine", "userinfo-machine",
			"    name: ubuntu-22-04\n    kind: Url\n    importFrom: https://deploy:s3cr3t@images.example.com/jammy.qcow2\n", ""),
		want: importUserinfo,
	},
	{
		name: "A machine imported over ftp is rejected, as a VMImage is.",
		manifest: machine("VSphereMachine", "ftp-machine",
			"    name: ubuntu-22-04\n    kind: Url\n    importFrom: ftp://images.example.com/jammy.ova\n", ""),
		want: importHTTPOnly,
	},
	{
		name: "A machine imported from a hex-written metadata address is rejected, as a VMImage is.",
		manifest: machine("VSphereMachine", "hex-machine",
			"    name: ubuntu-22-04\n    kind: Url\n    importFrom: http://0xa9fea9fe/\n", ""),
		want: importHostForm,
	},
	{
		name: "A machine whose Url image ref is a URL is rejected, as a VMImage is.",
		manifest: machine("ProxmoxMachine", "url-ref-machine",
			"    name: ubuntu-22-04\n    kind: Url\n    ref: https://images.example.com/jammy.qcow2\n", ""),
		want: `spec.image.ref: Invalid value: ` + urlRefName,
	},
	{
		name: "A machine whose image checksum is md5 is rejected, as a VMImage is.",
		manifest: machine("LibvirtMachine", "md5-machine",
			"    name: ubuntu-22-04\n    kind: BackingFile\n    ref: images/jammy.qcow2\n    checksum: md5:d41d8cd98f00b204e9800998ecf8427e\n", ""),
		want: "checksum must be sha256:<64 lowercase hex digits> or sha512:<128 lowercase hex digits>",
	},
	{
		name: "A machine whose resolved image climbs out of the pool with '..' is rejected.",
		manifest: machine("LibvirtMachine", "resolved-traversal",
			"    name: ubuntu-22-04\n    kind: BackingFile\n    ref: images/jammy.qcow2\n    resolvedRef: images/../../etc/shadow\n", ""),
		want: `spec.image.resolvedRef: Invalid value: "images/../../etc/shadow": resolvedRef must not contain '..' path segments or control characters`,
	},
	{
		name: "A machine whose template path climbs out with '..' is rejected.",
		manifest: machine("VSphereMachine", "template-traversal",
			"    name: ubuntu-22-04\n    kind: Template\n    ref: /dc1/vm/../../dc2/vm/tenant-b/db-01\n", ""),
		want: `spec.image.ref: Invalid value: "/dc1/vm/../../dc2/vm/tenant-b/db-01": ` + refPath,
	},
	{
		name:     "A machine with more CPUs than a VMClass allows is rejected.",
		manifest: replaceOnce(machine("ProxmoxMachine", "many-cpus", "", ""), "cpus: 2", "cpus: 4096"),
		want:     "spec.hardware.cpus in body should be less than or equal to 768",
	},
	{
		name:     "A machine with less memory than a VMClass allows is rejected.",
		manifest: replaceOnce(machine("LibvirtMachine", "tiny-memory", "", ""), "memoryMiB: 2048", "memoryMiB: 16"),
		want:     "spec.hardware.memoryMiB in body should be greater than or equal to 128",
	},
	{
		name:     "A machine with more memory than a VMClass allows is rejected.",
		manifest: replaceOnce(machine("VSphereMachine", "huge-memory", "", ""), "memoryMiB: 2048", "memoryMiB: 999999999"),
		want:     "spec.hardware.memoryMiB in body should be less than or equal to 25165824",
	},
	{
		name: "A machine disk larger than a VMClass allows is rejected.",
		manifest: machine("ProxmoxMachine", "huge-disk", "", `  disks:
  - name: root
    sizeGiB: 1000000
    storageClass: fast-ssd
`),
		want: "spec.disks[0].sizeGiB in body should be less than or equal to 65536",
	},
	{
		name: "A machine disk whose name is not a DNS label is rejected.",
		manifest: machine("LibvirtMachine", "disk-name", "", `  disks:
  - name: ../root
    sizeGiB: 10
    storageClass: fast-ssd
`),
		want: "spec.disks[0].name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
	},
	{
		name: "A machine with two disks of the same name is rejected.",
		manifest: machine("VSphereMachine", "same-disks", "", `  disks:
  - name: root
    sizeGiB: 10
    storageClass: fast-ssd
  - name: root
    sizeGiB: 20
    storageClass: fast-ssd
`),
		want: "disk names must be unique",
	},
	{
		name: "A machine interface whose name is not a DNS label is rejected.",
		manifest: machine("ProxmoxMachine", "nic-name", "", `  interfaces:
  - name: eth0;reboot
    networkClass: prod-net
`),
		want: "spec.interfaces[0].name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
	},
	{
		name: "A machine with two interfaces of the same name is rejected.",
		manifest: machine("LibvirtMachine", "same-nics", "", `  interfaces:
  - name: eth0
    networkClass: prod-net
  - name: eth0
    networkClass: backup-net
`),
		want: "interface names must be unique",
	},
	{
		name:     "A machine whose failure domain is a path is rejected.",
		manifest: machine("VSphereMachine", "path-failure-domain", "", "  failureDomain: dc1/cluster-a\n"),
		want:     "failureDomain must be a failure domain name, without '/' or control characters",
	},
	{
		name:     "A machine whose failure domain is longer than 253 characters is rejected.",
		manifest: machine("LibvirtMachine", "long-failure-domain", "", "  failureDomain: "+strings.Repeat("a", 254)+"\n"),
		want:     "spec.failureDomain: Too long: may not be more than 253 bytes",
	},
	{
		name: "A machine disk target value longer than 1024 characters is rejected.",
		manifest: machine("VSphereMachine", "target-long", "", `  disks:
  - name: root
    sizeGiB: 10
    storageClass: fast-ssd
    target: {datastore: `+strings.Repeat("d", 1025)+`}
`),
		want: `spec.disks[0].target: Invalid value: target keys must be at most 63 characters and values at most 1024`,
	},

	// vSphere options.
	{
		name:     "A VSphereMachine whose folder climbs out with '..' is rejected.",
		manifest: machine("VSphereMachine", "folder-traversal", "", "  vsphere:\n    folder: /dc1/vm/tenant-a/../tenant-b\n"),
		want:     `spec.vsphere.folder: Invalid value: "/dc1/vm/tenant-a/../tenant-b": ` + vspherePath,
	},
	{
		name:     "A VSphereMachine whose resource pool has a control character is rejected.",
		manifest: machine("VSphereMachine", "pool-control", "", "  vsphere:\n    resourcePool: \"/dc1/host/cluster-a/Resources\\n\"\n"),
		want:     `spec.vsphere.resourcePool: Invalid value: "/dc1/host/cluster-a/Resources\n": ` + vspherePath,
	},
	{
		name:     "A VSphereMachine whose datastore is '..' is rejected.",
		manifest: machine("VSphereMachine", "datastore-dotdot", "", "  vsphere:\n    datastore: ..\n"),
		want:     `spec.vsphere.datastore: Invalid value: "..": ` + vspherePath,
	},
	{
		name:     "A VSphereMachine whose datacenter ends in '..' is rejected.",
		manifest: machine("VSphereMachine", "datacenter-dotdot", "", "  vsphere:\n    datacenter: dc1/..\n"),
		want:     `spec.vsphere.datacenter: Invalid value: "dc1/..": ` + vspherePath,
	},
	{
		name: "A VSphereMachineTemplate whose folder climbs out with '..' is rejected, as a machine is.",
		manifest: `
apiVersion: infrastructure.banlieue.io/v1alpha1
kind: VSphereMachineTemplate
metadata:
  name: template-folder-traversal
spec:
  template:
    spec:
      providerRef: {namespace: infra, name: backend-1}
      image: {name: ubuntu-22-04, kind: Template, ref: ubuntu-2204-tpl}
      hardware: {cpus: 2, memoryMiB: 2048}
      vsphere:
        folder: ../../tenant-b
`,
		want: `spec.template.spec.vsphere.folder: Invalid value: "../../tenant-b": ` + vspherePath,
	},

	// Proxmox VE options.
	{
		name:     "A ProxmoxMachine whose node has a path in it is rejected.",
		manifest: machine("ProxmoxMachine", "node-path", "", "  proxmox:\n    node: pve1/../pve2\n"),
		want:     "node must be a Proxmox VE node name: letters, digits and '-', starting and ending with a letter or digit",
	},
	{
		name:     "A ProxmoxMachine whose failure domain is not a node name is rejected.",
		manifest: machine("ProxmoxMachine", "fd-not-node", "", "  failureDomain: pve_1\n"),
		want:     `spec.failureDomain: Invalid value: failureDomain of a Proxmox VE machine is a node name`,
	},
	{
		name:     "A ProxmoxMachine whose pool climbs out with '..' is rejected.",
		manifest: machine("ProxmoxMachine", "pool-traversal", "", "  proxmox:\n    pool: tenants/../admins\n"),
		want:     "pool must be a Proxmox VE pool ID",
	},

	// libvirt options.
	{
		name:     "A LibvirtMachine whose storage pool is a path is rejected.",
		manifest: machine("LibvirtMachine", "pool-path", "", "  libvirt:\n    storagePool: ../images\n"),
		want:     "storagePool must be a libvirt storage pool name",
	},

	{
		name: "A machine interface target key longer than 63 characters is rejected.",
		manifest: machine("LibvirtMachine", "target-key-long", "", `  interfaces:
  - name: eth0
    networkClass: prod-net
    target: {`+strings.Repeat("k", 64)+`: default}
`),
		want: "target keys must be at most 63 characters and values at most 1024",
	},

	{
		name:     "A LibvirtMachine whose CPU mode is XML is rejected.",
		manifest: machine("LibvirtMachine", "cpu-mode-xml", "", "  libvirt:\n    cpuMode: \"host-passthrough'/><devices>\"\n"),
		want:     `spec.libvirt.cpuMode: Unsupported value: "host-passthrough'/><devices>"`,
	},
	{
		name:     "A LibvirtMachine whose machine type has spaces is rejected.",
		manifest: machine("LibvirtMachine", "machine-type-space", "", "  libvirt:\n    machineType: q35 -device evil\n"),
		want:     "machineType must be a QEMU machine type such as q35 or pc-q35-8.2",
	},
}

// soundReferenceManifests are the manifests next to the rejected ones that must still be
// accepted: a libvirt endpoint naming its SSH user, a loopback import (a Provider opts in
// at import time), IPv6 literals, nested Proxmox pools and node names with capitals.
var soundReferenceManifests = []struct{ name, manifest string }{
	{
		name:     "A libvirt endpoint naming the SSH user, without a password, is accepted.",
		manifest: replaceOnce(provider("libvirt-ssh-user", "    endpoint: qemu+ssh://banlieue@kvm1.example.com/system?keyfile=/etc/banlieue/id_ed25519\n"), "name: vsphere", "name: libvirt"),
	},
	{
		name:     "A local libvirt endpoint is accepted.",
		manifest: replaceOnce(provider("libvirt-local", "    endpoint: qemu:///system\n"), "name: vsphere", "name: libvirt"),
	},
	{
		name:     "An https endpoint with a port, an IPv6 host and a query is accepted.",
		manifest: provider("ipv6-endpoint", "    endpoint: \"https://[2001:db8::10]:8006/api2/json?node=pve1\"\n"),
	},
	{
		name:     "A Url source importing from loopback, with a name as ref, is accepted: loopback is refused at import time unless the Provider allows it.",
		manifest: urlImage("loopback-import", "    ref: jammy-server_2204.qcow2\n    importFrom: http://127.0.0.1:8080/jammy.qcow2\n"),
	},
	{
		name:     "A Url source importing from an IPv6 address with a pre-signed query is accepted.",
		manifest: urlImage("ipv6-import", "    importFrom: \"https://[2001:db8::10]/jammy.qcow2?X-Signature=abc\"\n"),
	},
	{
		name:     "A Url source importing from a host whose first label is digits is accepted.",
		manifest: urlImage("digit-host-import", "    importFrom: https://123.images.example.com/jammy.qcow2\n"),
	},
	{
		name: "A ProxmoxMachine with a node in capitals, a nested pool, a storage ID and a bridge is accepted.",
		manifest: machine("ProxmoxMachine", "sound-proxmox", "", `  failureDomain: PVE-01
  disks:
  - name: root
    sizeGiB: 65536
    storageClass: fast-ssd
    target: {storage: local-lvm}
  interfaces:
  - name: eth0
    networkClass: prod-net
    target: {bridge: vmbr0}
  proxmox:
    node: PVE-01
    pool: tenants/web
`),
	},
	{
		name: "A LibvirtMachine with a pool, a network, a machine type and a CPU mode is accepted.",
		manifest: replaceOnce(replaceOnce(machine("LibvirtMachine", "sound-libvirt",
			"    name: ubuntu-22-04\n    kind: BackingFile\n    ref: images/jammy.qcow2\n    resolvedRef: /var/lib/libvirt/images/jammy.qcow2\n", `  failureDomain: kvm1
  disks:
  - name: root
    sizeGiB: 10
    storageClass: fast-ssd
    target: {pool: default}
  interfaces:
  - name: eth0
    networkClass: prod-net
    target: {network: default}
  - name: eth1
    networkClass: lab-net
    target: {bridge: virbr0}
  libvirt:
    storagePool: default
    machineType: pc-q35-8.2
    cpuMode: host-passthrough
`), "cpus: 2", "cpus: 768"), "memoryMiB: 2048", "memoryMiB: 25165824"),
	},
	{
		name: "A VSphereMachine with inventory paths and an imported image is accepted.",
		manifest: machine("VSphereMachine", "sound-vsphere",
			"    name: ubuntu-22-04\n    kind: Url\n    ref: ubuntu-22-04\n    importFrom: https://images.example.com/jammy.ova\n    checksum: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n", `  failureDomain: dc1-cluster-a
  vsphere:
    datacenter: /dc1
    folder: /dc1/vm/tenant-a
    resourcePool: /dc1/host/cluster-a/Resources/tenant-a
    datastore: ds-ssd-01
`),
	},
}

// TestReferencesAndURLsAreValidated sends each hostile reference or URL to the API server
// and checks the rejection's message; the sound manifests beside them must be accepted.
func TestReferencesAndURLsAreValidated(t *testing.T) {
	needAPIServer(t)
	for _, tc := range referenceCases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t) })
	}
	for _, tc := range soundReferenceManifests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			obj := fromYAML(t, tc.manifest)
			g.Expect(k8sClient.Create(testContext(t), obj)).To(Succeed())
			deleteAtCleanup(t, obj)
		})
	}
	t.Run("A refused URL's password or token is not quoted back in the API server's message.", func(t *testing.T) {
		g := NewWithT(t)
		for _, manifest := range []string{
			provider("quoted-password", "    endpoint: https://administrator:hunter2@vcenter.example.com/sdk\n"),
			urlImage("quoted-token", "    importFrom: ftp://deploy:s3cr3t-token@images.example.com/jammy.qcow2?sig=t0ken\n"),
			machine("LibvirtMachine", "quoted-machine-token", "    name: ubuntu-22-04\n    kind: Url\n    importFrom: http://deploy:s3cr3t-token@169.254.169.254/?sig=t0ken\n", ""),
		} {
			obj := fromYAML(t, manifest)
			err := k8sClient.Create(testContext(t), obj)
			if err == nil {
				deleteAtCleanup(t, obj)
			}
			g.Expect(err).To(HaveOccurred())
			for _, secret := range []string{"hunter2", "s3cr3t-token", "t0ken"} {
				g.Expect(err.Error()).NotTo(ContainSubstring(secret))
			}
		}
	})
	if len(referenceCases) < 30 {
		t.Errorf("only %d reference and URL rows; issue 14 asks for at least 30", len(referenceCases))
	}
}
