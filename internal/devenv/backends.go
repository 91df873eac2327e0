package devenv

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/vsphere"
	"github.com/banlieue/banlieue/sim/libvirtd"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
	vspheresim "github.com/banlieue/banlieue/sim/vsphere"
)

// ProviderNamespace is where 'banlieue dev' puts the Providers of its simulated backends
// and their credentials.
const ProviderNamespace = "infra"

// Backends are the simulated backends of 'banlieue dev'.
type Backends struct {
	// VSphere is the simulated vCenter.
	VSphere *vspheresim.Simulator
	// Proxmox is the simulated Proxmox VE cluster.
	Proxmox *proxmoxsim.Simulator
	// Libvirt is a private libvirtd with a pool, a network and an image (the guest image,
	// or a blank disk without it); nil when none can run here, and LibvirtUnavailable
	// says why.
	Libvirt *libvirtd.Daemon
	// LibvirtGuest is the guest image the libvirt pool holds; "" for a blank disk.
	LibvirtGuest string
	// LibvirtUnavailable says why Libvirt is nil.
	LibvirtUnavailable string
}

// StartBackends starts the simulated backends on loopback. guestImage is the qcow2
// hack/guest-image.sh builds (a Debian guest with cloud-init and the guest agent): the
// libvirt pool holds it as its image, so a VM there boots and reports its guest's
// address; without it the image is a blank disk.
func StartBackends(guestImage string) (*Backends, error) {
	vs, err := vspheresim.Start(vspheresim.Options{Templates: []string{VSphereTemplate}, VMs: VSphereLegacyVMs, GuestAddressDelay: time.Second})
	if err != nil {
		return nil, fmt.Errorf("failed to start the vCenter simulator: %w", err)
	}
	pve, err := proxmoxsim.Start(proxmoxsim.Options{
		Templates:       map[string]string{ProxmoxTemplate: "pve1"},
		Bridges:         []string{"vmbr0", "vmbr1"},
		GuestAgentDelay: time.Second,
		TaskDelay:       200 * time.Millisecond,
		// The controllers retry a rejected credential; PVE's 3 s would only slow them.
		UnauthorizedDelay: -1,
	})
	if err != nil {
		vs.Stop()
		return nil, fmt.Errorf("failed to start the Proxmox VE simulator: %w", err)
	}
	b := &Backends{VSphere: vs, Proxmox: pve}
	if b.LibvirtUnavailable = libvirtd.Unavailable(); b.LibvirtUnavailable == "" {
		if b.Libvirt, err = startLibvirt(guestImage); err != nil {
			b.Stop()
			return nil, err
		}
		b.LibvirtGuest = guestImage
	}
	return b, nil
}

// Names of the libvirt objects 'banlieue dev' makes: a directory pool with the image
// examples/ refers to, and a NATed network on a benchmarking subnet.
const (
	libvirtPool    = "banlieue"
	libvirtImage   = "guest.qcow2"
	libvirtNetwork = "banlieue"
)

// The image every dev backend holds, under each backend's name for it; examples/ and
// the suites that run on these backends refer to it.
const (
	// VSphereTemplate is the vCenter simulator's template.
	VSphereTemplate = "ubuntu-22.04-template"
	// ProxmoxTemplate is the Proxmox VE simulator's template.
	ProxmoxTemplate = "ubuntu-2204-tpl"
	// LibvirtImage is the guest image (or blank qcow2) volume, as pool/volume.
	LibvirtImage = libvirtPool + "/" + libvirtImage
)

// VSphereLegacyVMs are running VMs the simulated vCenter has before banlieue starts, as
// any vCenter has: what the README's Day 2 adopts with banlieue adopt.
var VSphereLegacyVMs = []string{"legacy-app-01", "legacy-db-01"}

// Image returns a VMImage named name with a source on every dev backend.
func Image(name string) *banlieuev1.VMImage {
	img := builder.VMImage(name,
		builder.Template(vsphere.ProviderClass, VSphereTemplate),
		builder.Template(proxmox.ProviderClass, ProxmoxTemplate),
		builder.BackingFile(libvirt.ProviderClass, LibvirtImage),
	)
	img.Spec.OSFamily, img.Spec.OSDistribution, img.Spec.OSVersion = "linux", "ubuntu", "22.04"
	img.Spec.Architecture, img.Spec.GuestAgent = "amd64", banlieuev1.GuestAgentNone
	return img
}

// Class returns a VMClass named name that every dev Provider offers: cpus and memoryMiB,
// one 10 GiB disk of storage class fast-ssd and one NIC on network class prod-net.
func Class(name string, cpus int32, memoryMiB int64) *banlieuev1.VMClass {
	return builder.VMClass(name, builder.WithHardware(cpus, memoryMiB),
		builder.WithDisks(banlieuev1.Disk{Name: "root", SizeGiB: 10, StorageClass: "fast-ssd"}),
		builder.WithInterfaces(banlieuev1.Interface{Name: "eth0", NetworkClass: "prod-net"}))
}

func startLibvirt(guestImage string) (*libvirtd.Daemon, error) {
	d, err := libvirtd.Start(libvirtd.Options{})
	if err != nil {
		return nil, fmt.Errorf("failed to start libvirtd: %w", err)
	}
	if err := PrepareLibvirt(d, guestImage); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// PrepareLibvirt makes in d what LibvirtObjects and Image name: the pool, the network
// and the image volume, which is guestImage (see StartBackends) or a blank disk.
func PrepareLibvirt(d *libvirtd.Daemon, guestImage string) error {
	_, err := d.DefineDirPool(libvirtPool)
	if err == nil {
		_, err = d.DefineTestNetwork(libvirtNetwork, "bnldev")
	}
	if err == nil && guestImage != "" {
		err = d.AddImage(libvirtPool, libvirtImage, guestImage)
	} else if err == nil {
		err = d.CreateBlankImage(libvirtPool, libvirtImage, 2)
	}
	if err != nil {
		return fmt.Errorf("failed to prepare libvirtd: %w", err)
	}
	return nil
}

// Stop stops the simulated backends.
func (b *Backends) Stop() {
	b.VSphere.Stop()
	b.Proxmox.Stop()
	if b.Libvirt != nil {
		b.Libvirt.Stop()
	}
}

// ProviderConfigs are the providers that serve the simulated backends, as banlieue
// provider runs them by default: the Proxmox provider uploads user data as NoCloud
// seed ISOs through the API, to the simulator's local storage.
func (b *Backends) ProviderConfigs() []providersdk.Config {
	configs := []providersdk.Config{vsphere.Config(), proxmox.Config()}
	if b.Libvirt != nil {
		configs = append(configs, libvirt.Config())
	}
	return configs
}

// Objects are the Kubernetes objects that point banlieue at the simulated backends: the
// Providers' namespace, the system namespace an install has (where the providers
// register their shards), and a credentials Secret and a Provider for each backend.
func (b *Backends) Objects() []client.Object {
	namespace := func(name string) client.Object {
		return &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	objs := []client.Object{namespace(ProviderNamespace), namespace(providersdk.DefaultShardNamespace)}
	objs = append(objs, VSphereObjects(b.VSphere)...)
	objs = append(objs, ProxmoxObjects(b.Proxmox)...)
	if b.Libvirt != nil {
		objs = append(objs, LibvirtObjects(b.Libvirt))
	}
	return objs
}

// LibvirtObjects is the Provider (infra/kvm-dev) for the private libvirtd d: its local
// socket needs no credentials. It is labelled env=dev, so the examples' VM moves here
// when its providerSelector says dev.
func LibvirtObjects(d *libvirtd.Daemon) client.Object {
	return devProvider("kvm-dev", "libvirt", "dev", banlieuev1.Connection{Endpoint: d.QEMUURI()},
		map[string]string{libvirt.TargetPool: libvirtPool}, map[string]string{libvirt.TargetNetwork: libvirtNetwork},
		// TCG: the examples' EFI guest has no OS, which some nested KVM setups cannot run.
		map[string]string{libvirt.ParamPool: libvirtPool, libvirt.ParamImagePool: libvirtPool, libvirt.ParamDomainType: "qemu"})
}

// ProxmoxObjects are the Secret (an API token) and the Provider (infra/pve-edge) for the
// simulated Proxmox VE cluster pve. The Provider is labelled env=edge, so the examples'
// VM (env=prod) lands on vSphere and moves here when its providerSelector says edge.
func ProxmoxObjects(pve *proxmoxsim.Simulator) []client.Object {
	const name = "pve-edge"
	p := devProvider(name, "proxmox", "edge", simConnection(pve.URL, name, pve.CACert),
		map[string]string{"storage": "local-lvm"}, map[string]string{"bridge": "vmbr0"},
		// The template lives on pve1's local storage, which a clone cannot leave.
		map[string]string{"node": "pve1"})
	return []client.Object{devSecret(name, map[string]string{"tokenID": pve.TokenID, "tokenSecret": pve.TokenSecret}), p}
}

// VSphereObjects are the Secret and the Provider (infra/vcenter-dc1) for the simulated
// vCenter vs. The Provider carries the labels examples/ selects (dc, env) and offers the
// storage and network classes examples/ asks for.
func VSphereObjects(vs *vspheresim.Simulator) []client.Object {
	const name = "vcenter-dc1"
	p := devProvider(name, "vsphere", "prod", simConnection(vs.URL.String(), name, vs.CACert),
		map[string]string{"datastore": vspheresim.Datastore}, map[string]string{"network": vspheresim.Network},
		map[string]string{"datacenter": vspheresim.Datacenter}, builder.WithFeatures("efiSecureBoot"))
	return []client.Object{devSecret(name, map[string]string{"username": vs.Username, "password": vs.Password}), p}
}

// devProvider is a Provider of class in ProviderNamespace, labelled for examples/ (dc1,
// env) and offering its classes fast-ssd and prod-net on the given targets, changed by
// opts.
func devProvider(name, class, env string, conn banlieuev1.Connection, storage, network, params map[string]string, opts ...func(*banlieuev1.Provider)) *banlieuev1.Provider {
	p := builder.Provider(ProviderNamespace, name, class, append([]func(*banlieuev1.Provider){
		builder.WithLabels(map[string]string{"dc": "dc1", "env": env, "backend": class}),
		builder.WithConnection(conn),
		builder.WithStorageClass("fast-ssd", storage),
		builder.WithNetworkClass("prod-net", network),
		builder.WithParameters(params),
	}, opts...)...)
	p.TypeMeta = metav1.TypeMeta{APIVersion: banlieuev1.GroupVersion.String(), Kind: "Provider"}
	return p
}

// simConnection reaches a simulator at endpoint with the credentials Secret secret and
// the simulator's own CA.
func simConnection(endpoint, secret string, ca []byte) banlieuev1.Connection {
	return banlieuev1.Connection{
		Endpoint:       endpoint,
		CredentialsRef: banlieuev1.LocalObjectReference{Name: secret},
		CABundle:       &banlieuev1.CABundle{Inline: string(ca)},
	}
}

// devSecret is a credentials Secret in ProviderNamespace.
func devSecret(name string, data map[string]string) *corev1.Secret {
	s := builder.Secret(ProviderNamespace, name, nil)
	s.TypeMeta, s.StringData = metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, data
	return s
}

// Manifest renders objs as a multi-document YAML manifest, without the empty fields
// (creationTimestamp, status) a typed object carries.
func Manifest(objs ...client.Object) (string, error) {
	var docs []string
	for _, o := range objs {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return "", fmt.Errorf("failed to convert %s: %w", client.ObjectKeyFromObject(o), err)
		}
		unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
		delete(u, "status")
		data, err := yaml.Marshal(u)
		if err != nil {
			return "", fmt.Errorf("failed to render %s: %w", client.ObjectKeyFromObject(o), err)
		}
		docs = append(docs, string(data))
	}
	return strings.Join(docs, "---\n"), nil
}
