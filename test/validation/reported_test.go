package validation

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	"github.com/banlieue/banlieue/providers/vsphere"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

// reportedCase is a hostile manifest, or set of manifests, that the API server accepts
// because its schema cannot know better, and that a controller must report by a
// condition instead of failing silently, retrying blindly or crashing.
type reportedCase struct {
	// name says, as a sentence, what is wrong and who reports it.
	name string
	// arrange creates the row's objects and returns the VirtualMachine or Provider whose
	// condition reports the problem.
	arrange func(w *world) client.Object
	// condition, status and reason are the condition that must report it.
	condition string
	status    metav1.ConditionStatus
	reason    string
	// message are substrings of the condition's message: the object or field it names,
	// what is wrong and, where the message's owner says it, what to do.
	message []string
	// then, when set, checks more once the condition holds: that nothing was silently
	// cut, that names stayed within their limits.
	then func(g Gomega, w *world, obj client.Object)
}

// Secret keys of the user-data Secrets.
const userDataKey = "user-data"

// oneMiBUserData is user data as large as a Secret holds: 1 MiB less room for the key.
// It is random text, so that no compression the driver might try shrinks it.
func oneMiBUserData() []byte {
	raw := make([]byte, (1<<20-1024)*3/4)
	_, _ = rand.Read(raw)
	return append([]byte("#cloud-config\n# "), base64.StdEncoding.EncodeToString(raw)...)
}

// The rows. Each runs in a namespace of its own with its own Providers, which its VMs
// select by label; the controllers and simulators are shared.
var reportedCases = []reportedCase{
	// Credentials.
	{
		name: "A vSphere credentials Secret with keys user and pass instead of username and password makes the Provider CredentialsInvalid.",
		arrange: func(w *world) client.Object {
			return w.vsphereProvider(func(_ *banlieuev1.Provider, s *corev1.Secret) {
				s.Data = map[string][]byte{"user": s.Data["username"], "pass": s.Data["password"]}
			})
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderCredentialsInvalidReason,
		message: []string{"credentials Secret hostile-", "/vcenter", `"username"`, `"password"`},
	},
	{
		name: "A vSphere credentials Secret whose username and password are empty makes the Provider CredentialsInvalid.",
		arrange: func(w *world) client.Object {
			return w.vsphereProvider(func(_ *banlieuev1.Provider, s *corev1.Secret) {
				s.Data = map[string][]byte{"username": {}, "password": {}}
			})
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderCredentialsInvalidReason,
		message: []string{"/vcenter", `has an empty "username" key`, `(it needs "username" and "password")`},
	},
	{
		name: "A vSphere password that ends in a newline, as echo writes it, makes the Provider CredentialsInvalid.",
		arrange: func(w *world) client.Object {
			return w.vsphereProvider(func(_ *banlieuev1.Provider, s *corev1.Secret) {
				s.Data["password"] = append(s.Data["password"], '\n')
			})
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderCredentialsInvalidReason,
		message: []string{"/vcenter", `has a "password" key that ends in a newline`, "echo -n"},
	},
	{
		name: "A Proxmox credentials Secret with keys token and secret makes the Provider CredentialsInvalid.",
		arrange: func(w *world) client.Object {
			return w.proxmoxProvider(func(_ *banlieuev1.Provider, s *corev1.Secret) {
				s.Data = map[string][]byte{"token": s.Data["tokenID"], "secret": s.Data["tokenSecret"]}
			})
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderCredentialsInvalidReason,
		message: []string{"/pve", `"tokenID" and "tokenSecret", or "username" and "password"`},
	},
	{
		name: "A Proxmox credentials Secret with a token ID and an empty token secret makes the Provider CredentialsInvalid.",
		arrange: func(w *world) client.Object {
			return w.proxmoxProvider(func(_ *banlieuev1.Provider, s *corev1.Secret) { s.Data["tokenSecret"] = []byte{} })
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderCredentialsInvalidReason,
		message: []string{"/pve", `has an empty "tokenSecret" key`},
	},
	{
		name: "A Proxmox token secret that ends in a newline makes the Provider CredentialsInvalid, not Unreachable.",
		arrange: func(w *world) client.Object {
			return w.proxmoxProvider(func(_ *banlieuev1.Provider, s *corev1.Secret) {
				s.Data["tokenSecret"] = append(s.Data["tokenSecret"], '\n')
			})
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderCredentialsInvalidReason,
		message: []string{"/pve", `has a "tokenSecret" key that ends in a newline`, "echo -n"},
	},
	{
		name: "A vSphere Provider whose credentials Secret does not exist is CredentialsNotFound.",
		arrange: func(w *world) client.Object {
			return w.vsphereProvider(func(_ *banlieuev1.Provider, s *corev1.Secret) { s.Name = "" })
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderCredentialsNotFoundReason,
		message: []string{"/vcenter", "not found"},
	},
	{
		name: "A Proxmox Provider whose credentials Secret does not exist is CredentialsNotFound.",
		arrange: func(w *world) client.Object {
			return w.proxmoxProvider(func(_ *banlieuev1.Provider, s *corev1.Secret) { s.Name = "" })
		},
		condition: banlieuev1.ProviderCredentialsValidCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderCredentialsNotFoundReason,
		message: []string{"/pve", "not found"},
	},

	// CA bundles and endpoints.
	{
		name: "A vSphere CA bundle that is not PEM makes the Provider CredentialsInvalid.",
		arrange: func(w *world) client.Object {
			return w.vsphereProvider(func(p *banlieuev1.Provider, _ *corev1.Secret) {
				p.Spec.Connection.CABundle = &banlieuev1.CABundle{Inline: "MIIBszCCAVmgAwIBAgIUnot-a-pem-bundle"}
			})
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderCredentialsInvalidReason,
		message: []string{"spec.connection.caBundle", "no PEM certificate"},
	},
	{
		name: "A Proxmox CA bundle Secret whose key holds no PEM makes the Provider CredentialsInvalid.",
		arrange: func(w *world) client.Object {
			w.secret("pve-ca", map[string][]byte{"ca.crt": {0x30, 0x82, 0x01, 0xb3, 0x30, 0x82}})
			return w.proxmoxProvider(func(p *banlieuev1.Provider, _ *corev1.Secret) {
				p.Spec.Connection.CABundle = &banlieuev1.CABundle{SecretRef: banlieuev1.KeyReference{Name: "pve-ca", Key: "ca.crt"}}
			})
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderCredentialsInvalidReason,
		message: []string{"spec.connection.caBundle", "no PEM certificate"},
	},
	{
		name: "A vSphere CA bundle in a ConfigMap that does not exist is CredentialsNotFound.",
		arrange: func(w *world) client.Object {
			return w.vsphereProvider(func(p *banlieuev1.Provider, _ *corev1.Secret) {
				p.Spec.Connection.CABundle = &banlieuev1.CABundle{ConfigMapRef: banlieuev1.KeyReference{Name: "vcenter-ca", Key: "ca.crt"}}
			})
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderCredentialsNotFoundReason,
		message: []string{"ConfigMap hostile-", "/vcenter-ca"},
	},
	{
		name: "A vSphere CA bundle ConfigMap without the named key is CredentialsNotFound.",
		arrange: func(w *world) client.Object {
			w.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "vcenter-ca"}, Data: map[string]string{"ca.pem": string(w.vs.CAPEM)}})
			return w.vsphereProvider(func(p *banlieuev1.Provider, _ *corev1.Secret) {
				p.Spec.Connection.CABundle = &banlieuev1.CABundle{ConfigMapRef: banlieuev1.KeyReference{Name: "vcenter-ca", Key: "ca.crt"}}
			})
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderCredentialsNotFoundReason,
		message: []string{"/vcenter-ca", `has no key "ca.crt"`},
	},
	{
		name: "A vSphere CA bundle of another CA makes the Provider Unreachable with advice on the bundle.",
		arrange: func(w *world) client.Object {
			other, err := vspheretest.NewCA()
			w.g.Expect(err).NotTo(HaveOccurred())
			return w.vsphereProvider(func(p *banlieuev1.Provider, _ *corev1.Secret) {
				p.Spec.Connection.CABundle = &banlieuev1.CABundle{Inline: string(other)}
			})
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderBackendUnreachableReason,
		message: []string{"signed by an unknown authority", "set spec.connection.caBundle"},
	},
	{
		name: "A vSphere endpoint that is not a URL makes the Provider CredentialsInvalid.",
		arrange: func(w *world) client.Object {
			return w.vsphereProvider(func(p *banlieuev1.Provider, _ *corev1.Secret) { p.Spec.Connection.Endpoint = "https://[::1" })
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderCredentialsInvalidReason,
		message: []string{`spec.connection.endpoint "https://[::1"`, "https://vcenter.example.com/sdk"},
	},
	{
		name: "A Proxmox endpoint over plain http makes the Provider CredentialsInvalid.",
		arrange: func(w *world) client.Object {
			return w.proxmoxProvider(func(p *banlieuev1.Provider, _ *corev1.Secret) {
				p.Spec.Connection.Endpoint = strings.Replace(p.Spec.Connection.Endpoint, "https://", "http://", 1)
			})
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderCredentialsInvalidReason,
		message: []string{"spec.connection.endpoint", "must be an https URL"},
	},

	// Provider parameters.
	{
		name: "A vSphere Provider whose datacenter parameter names no datacenter reports InventoryFailed.",
		arrange: func(w *world) client.Object {
			return w.vsphereProvider(func(p *banlieuev1.Provider, _ *corev1.Secret) { p.Spec.Parameters["datacenter"] = "DC9" })
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderInventoryFailedReason,
		message: []string{`datacenter "DC9"`, vspheretest.Datacenter},
	},
	{
		name: "A Proxmox Provider whose node parameter names no node reports InventoryFailed.",
		arrange: func(w *world) client.Object {
			return w.proxmoxProvider(func(p *banlieuev1.Provider, _ *corev1.Secret) { p.Spec.Parameters["node"] = "pve9" })
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: banlieuev1.ProviderInventoryFailedReason,
		message: []string{`"pve9"`, proxmoxtest.Node1, proxmoxtest.Node2},
	},

	// References.
	{
		name: "A VM whose classRef names no VMClass is not scheduled: ClassNotFound.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			return w.vm("web-1", &banlieuev1.VMClass{ObjectMeta: metav1.ObjectMeta{Name: w.name("no-such-class")}}, w.image())
		},
		condition: banlieuev1.VirtualMachineScheduledCondition, status: metav1.ConditionFalse, reason: banlieuev1.VirtualMachineClassNotFoundReason,
		message: []string{"VMClass hostile-", "-no-such-class does not exist"},
	},
	{
		name: "A VM whose imageRef names no VMImage is not scheduled: ImageNotFound.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			return w.vm("web-1", w.class(), &banlieuev1.VMImage{ObjectMeta: metav1.ObjectMeta{Name: w.name("no-such-image")}})
		},
		condition: banlieuev1.VirtualMachineScheduledCondition, status: metav1.ConditionFalse, reason: banlieuev1.VirtualMachineImageNotFoundReason,
		message: []string{"VMImage hostile-", "-no-such-image does not exist"},
	},
	{
		name: "A VM whose image has no source for the class of the only Provider it selects has NoCandidate.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			img := w.image(builder.BackingFile("libvirt", "default/jammy.qcow2"))
			return w.vm("web-1", w.class(), img)
		},
		condition: banlieuev1.VirtualMachineScheduledCondition, status: metav1.ConditionFalse, reason: banlieuev1.VirtualMachineNoCandidateReason,
		message: []string{"/vcenter: image hostile-", `has no source for provider class "vsphere"`},
	},
	{
		name: "A VM whose image's template does not exist on vCenter has NoCandidate naming the template.",
		arrange: func(w *world) client.Object {
			p := w.vsphereProvider()
			w.ready(p)
			img := w.image(builder.Template(vsphere.ProviderClass, "no-such-template"))
			w.resolved(img, p)
			return w.vm("web-1", w.class(), img)
		},
		condition: banlieuev1.VirtualMachineScheduledCondition, status: metav1.ConditionFalse, reason: banlieuev1.VirtualMachineNoCandidateReason,
		message: []string{"/vcenter: image hostile-", "is not ready here", `"no-such-template"`},
	},
	{
		name: "A VM whose class asks for a storage class no Provider offers has NoCandidate naming it.",
		arrange: func(w *world) client.Object {
			w.ready(w.proxmoxProvider())
			class := w.class(func(c *banlieuev1.VMClass) { c.Spec.Hardware.Disks[0].StorageClass = "gold" })
			return w.vm("web-1", class, w.image())
		},
		condition: banlieuev1.VirtualMachineScheduledCondition, status: metav1.ConditionFalse, reason: banlieuev1.VirtualMachineNoCandidateReason,
		message: []string{"/pve: ", `storage class "gold" (disk root) is not in its capabilities`},
	},

	// Placement.
	{
		name: "A VM whose provider selector matches no Provider has NoCandidate.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			return w.vm("web-1", w.class(), w.image(), func(vm *banlieuev1.VirtualMachine) {
				vm.Spec.Placement.ProviderSelector.MatchLabels["env"] = "nowhere"
			})
		},
		condition: banlieuev1.VirtualMachineScheduledCondition, status: metav1.ConditionFalse, reason: banlieuev1.VirtualMachineNoCandidateReason,
		message: []string{"no Provider can run this VM", "/vcenter: not selected by placement.providerSelector"},
	},
	{
		name: "A VM that selects only a Provider of a class no provider runs has NoCandidate saying so.",
		arrange: func(w *world) client.Object {
			w.create(&banlieuev1.Provider{
				ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "ahv", Labels: map[string]string{"test": w.ns}},
				Spec: banlieuev1.ProviderSpec{
					ProviderClassRef: banlieuev1.LocalObjectReference{Name: "nutanix"},
					Connection:       banlieuev1.Connection{Endpoint: "https://prism.example.com:9440"},
				},
			})
			return w.vm("web-1", w.class(), w.image())
		},
		condition: banlieuev1.VirtualMachineScheduledCondition, status: metav1.ConditionFalse, reason: banlieuev1.VirtualMachineNoCandidateReason,
		message: []string{"/ahv: no provider controller for class \"nutanix\" has claimed it"},
	},
	{
		name: "A VM that selects only a Proxmox Provider whose one node is offline has NoCandidate: the Provider is not Ready, and says why.",
		arrange: func(w *world) client.Object {
			// Only this row uses pve2; the others' Providers are on pve1.
			w.g.Expect(w.pve.SetNodeOnline(proxmoxtest.Node2, false)).To(Succeed())
			w.t.Cleanup(func() { _ = w.pve.SetNodeOnline(proxmoxtest.Node2, true) })
			w.proxmoxProvider(func(p *banlieuev1.Provider, _ *corev1.Secret) { p.Spec.Parameters["node"] = proxmoxtest.Node2 })
			return w.vm("web-1", w.class(), w.image())
		},
		condition: banlieuev1.VirtualMachineScheduledCondition, status: metav1.ConditionFalse, reason: banlieuev1.VirtualMachineNoCandidateReason,
		message: []string{"/pve: not Ready (no node this Provider may use is online", "(pve2 offline)"},
	},
	{
		name: "A VM that selects only a Provider whose namespaceSelector cannot parse has NoCandidate counting it; the Provider's own Ready says why.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			p := &banlieuev1.Provider{}
			w.g.Expect(k8sClient.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "vcenter"}, p)).To(Succeed())
			p.Spec.NamespaceSelector = &banlieuev1.LabelSelector{MatchLabels: map[string]string{"tenant name": "a"}}
			w.g.Expect(k8sClient.Update(w.ctx, p)).To(Succeed())
			return w.vm("web-1", w.class(), w.image())
		},
		condition: banlieuev1.VirtualMachineScheduledCondition, status: metav1.ConditionFalse, reason: banlieuev1.VirtualMachineNoCandidateReason,
		message: []string{"1 Provider does not admit namespace"},
		then: func(g Gomega, w *world, _ client.Object) {
			p := &banlieuev1.Provider{}
			g.Expect(k8sClient.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "vcenter"}, p)).To(Succeed())
			c := meta.FindStatusCondition(p.Status.Conditions, banlieuev1.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(banlieuev1.ProviderNamespaceSelectorInvalidReason))
			g.Expect(c.Message).To(ContainSubstring("tenant name"))
		},
	},
	{
		name: "A VM whose provider selector has a label key that cannot parse has NoCandidate naming the selector.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			return w.vm("web-1", w.class(), w.image(), func(vm *banlieuev1.VirtualMachine) {
				vm.Spec.Placement.ProviderSelector.MatchLabels["not a/valid/key"] = "x"
			})
		},
		condition: banlieuev1.VirtualMachineScheduledCondition, status: metav1.ConditionFalse, reason: banlieuev1.VirtualMachineNoCandidateReason,
		message: []string{"placement.providerSelector", `"not a/valid/key"`},
	},
	{
		name: "A VM whose provider selector has an In value that is no label value has NoCandidate naming the selector.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			return w.vm("web-1", w.class(), w.image(), func(vm *banlieuev1.VirtualMachine) {
				vm.Spec.Placement.ProviderSelector.MatchExpressions = []banlieuev1.LabelSelectorRequirement{
					{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod; drop table"}},
				}
			})
		},
		condition: banlieuev1.VirtualMachineScheduledCondition, status: metav1.ConditionFalse, reason: banlieuev1.VirtualMachineNoCandidateReason,
		message: []string{"placement.providerSelector", `"prod; drop table"`},
	},
	{
		name: "A VM whose failure-domain selector has a label value longer than 63 characters has NoCandidate naming the selector.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			return w.vm("web-1", w.class(), w.image(), func(vm *banlieuev1.VirtualMachine) {
				vm.Spec.Placement.FailureDomainSelector = &banlieuev1.LabelSelector{MatchLabels: map[string]string{"zone": strings.Repeat("z", 64)}}
			})
		},
		condition: banlieuev1.VirtualMachineScheduledCondition, status: metav1.ConditionFalse, reason: banlieuev1.VirtualMachineNoCandidateReason,
		message: []string{"placement.failureDomainSelector", "must be no more than 63"},
	},
	{
		name: "A VM whose anti-affinity selector has a key that cannot parse has NoCandidate naming the term.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			return w.vm("web-1", w.class(), w.image(), func(vm *banlieuev1.VirtualMachine) {
				vm.Spec.Placement.AntiAffinity = []banlieuev1.AntiAffinityTerm{{
					TopologyKey:   "host",
					LabelSelector: &banlieuev1.LabelSelector{MatchExpressions: []banlieuev1.LabelSelectorRequirement{{Key: "-app-", Operator: metav1.LabelSelectorOpExists}}},
				}}
			})
		},
		condition: banlieuev1.VirtualMachineScheduledCondition, status: metav1.ConditionFalse, reason: banlieuev1.VirtualMachineNoCandidateReason,
		message: []string{"antiAffinity", `"-app-"`},
	},

	// User data.
	{
		name: "A VM whose user-data Secret does not exist is not provisioned: UserDataNotFound.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			return w.vm("web-1", w.class(), w.image(), builder.WithUserData("cloud-init", ""))
		},
		condition: banlieuev1.VirtualMachineInfrastructureReadyCondition, status: metav1.ConditionFalse, reason: infrav1.MachineUserDataNotFoundReason,
		message: []string{"/cloud-init"},
		then:    noVSphereVM,
	},
	{
		name: "A VM whose user-data Secret lacks the key it names is not provisioned: UserDataNotFound naming the key.",
		arrange: func(w *world) client.Object {
			w.ready(w.proxmoxProvider())
			w.userDataSecret("cloud-init", map[string][]byte{"userdata": []byte("#cloud-config\n")})
			return w.vm("web-1", w.class(), w.image(), builder.WithUserData("cloud-init", ""))
		},
		condition: banlieuev1.VirtualMachineInfrastructureReadyCondition, status: metav1.ConditionFalse, reason: infrav1.MachineUserDataNotFoundReason,
		message: []string{"/cloud-init", `has no key "user-data"`},
	},
	{
		name: "A VM whose user data is in an Opaque Secret is not provisioned: UserDataNotPermitted naming the type it needs.",
		arrange: func(w *world) client.Object {
			w.ready(w.proxmoxProvider())
			w.secret("db-password", map[string][]byte{userDataKey: []byte("hunter2")})
			return w.vm("web-1", w.class(), w.image(), builder.WithUserData("db-password", ""))
		},
		condition: banlieuev1.VirtualMachineInfrastructureReadyCondition, status: metav1.ConditionFalse, reason: infrav1.MachineUserDataNotPermittedReason,
		message: []string{"/db-password", `of type "Opaque"`, banlieuev1.UserDataSecretType},
	},
	{
		name: "A VM with 1 MiB of user data on vSphere, more than guestinfo holds, is not provisioned: UserDataTooLarge.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			w.userDataSecret("cloud-init", map[string][]byte{userDataKey: oneMiBUserData()})
			return w.vm("web-1", w.class(), w.image(), builder.WithUserData("cloud-init", ""))
		},
		condition: banlieuev1.VirtualMachineInfrastructureReadyCondition, status: metav1.ConditionFalse, reason: infrav1.MachineUserDataTooLargeReason,
		message: []string{"/cloud-init", "guestinfo", "gzip"},
		then:    noVSphereVM,
	},
	{
		name: "A VM with 1 MiB of user data on Proxmox VE runs, with every byte in its snippet.",
		arrange: func(w *world) client.Object {
			w.ready(w.proxmoxProvider())
			w.userDataSecret("cloud-init", map[string][]byte{userDataKey: oneMiBUserData()})
			return w.vm("web-1", w.class(), w.image(), builder.WithUserData("cloud-init", ""))
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionTrue, reason: banlieuev1.VirtualMachineRunningReason,
		then: func(g Gomega, w *world, obj client.Object) {
			s := &corev1.Secret{}
			g.Expect(k8sClient.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "cloud-init"}, s)).To(Succeed())
			conf := w.proxmoxVM(g, obj.(*banlieuev1.VirtualMachine))
			volid := strings.TrimPrefix(conf["cicustom"], "user=")
			snippet, ok := w.pve.Volume(proxmoxtest.Node1, volid)
			g.Expect(ok).To(BeTrue(), "snippet %q", volid)
			g.Expect(bytes.Equal(snippet, s.Data[userDataKey])).To(BeTrue(), "the snippet holds %d bytes of the Secret's %d", len(snippet), len(s.Data[userDataKey]))
		},
	},

	// Names at their length limits.
	{
		name: "A VM with a 253-character name runs on vSphere, as a VM whose name vSphere accepts.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			return w.vm(longName("web"), w.class(), w.image())
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionTrue, reason: banlieuev1.VirtualMachineRunningReason,
		then: func(g Gomega, w *world, obj client.Object) {
			machineNamedAfter(g, w, obj, infrav1.GroupVersion.WithKind("VSphereMachine"))
			vm := w.vsphereVM(g, obj.(*banlieuev1.VirtualMachine))
			g.Expect(len(vm.Name)).To(BeNumerically("<=", 80), "vSphere VM name %q", vm.Name)
			meta, err := base64.StdEncoding.DecodeString(vspheretest.ExtraConfig(vm, "guestinfo.metadata"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(hostnameOf(string(meta))).To(MatchRegexp(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`), "local-hostname in %q", meta)
		},
	},
	{
		name: "A VM with a 253-character name runs on Proxmox VE, as a VM whose name is one DNS label.",
		arrange: func(w *world) client.Object {
			w.ready(w.proxmoxProvider())
			return w.vm(longName("web"), w.class(), w.image())
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionTrue, reason: banlieuev1.VirtualMachineRunningReason,
		then: func(g Gomega, w *world, obj client.Object) {
			machineNamedAfter(g, w, obj, infrav1.GroupVersion.WithKind("ProxmoxMachine"))
			conf := w.proxmoxVM(g, obj.(*banlieuev1.VirtualMachine))
			g.Expect(conf["name"]).To(MatchRegexp(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`))
		},
	},
	{
		name: "A VM of a VMClass and a VMImage with 253-character names runs on vSphere.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			class := w.class(func(c *banlieuev1.VMClass) { c.Name = longName(w.ns + "-class") })
			img := w.imageNamed(longName(w.ns + "-image"))
			return w.vm("web-1", class, img)
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionTrue, reason: banlieuev1.VirtualMachineRunningReason,
	},
	{
		name: "A VM whose name is a number to YAML gets that name, not the number, as its vSphere hostname.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			return w.vm("0777", w.class(), w.image())
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionTrue, reason: banlieuev1.VirtualMachineRunningReason,
		then: func(g Gomega, w *world, obj client.Object) {
			vm := w.vsphereVM(g, obj.(*banlieuev1.VirtualMachine))
			meta, err := base64.StdEncoding.DecodeString(vspheretest.ExtraConfig(vm, "guestinfo.metadata"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(meta)).To(ContainSubstring(`local-hostname: "0777"`))
		},
	},

	// Huge values.
	{
		// Defined powered off: PVE starts no VM with more CPUs than its node has.
		name: "A VM of the largest VMClass the API allows is made on Proxmox VE with exactly those values, none cut or overflowed.",
		arrange: func(w *world) client.Object {
			w.ready(w.proxmoxProvider())
			return w.vm("web-1", w.class(largestClass), w.image(), func(vm *banlieuev1.VirtualMachine) {
				vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOff
			})
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionTrue, reason: banlieuev1.VirtualMachineRunningReason,
		then: func(g Gomega, w *world, obj client.Object) {
			g.Expect(obj.(*banlieuev1.VirtualMachine).Status.ObservedPowerState).To(Equal(banlieuev1.PowerStatePoweredOff))
			conf := w.proxmoxVM(g, obj.(*banlieuev1.VirtualMachine))
			g.Expect(conf).To(HaveKeyWithValue("cores", "768"))
			g.Expect(conf).To(HaveKeyWithValue("memory", "25165824"))
			g.Expect(conf["scsi0"]).To(ContainSubstring("size=64T"))
		},
	},
	{
		name: "A VM with more CPUs than its Proxmox VE node has is not started, and says PVE's refusal.",
		arrange: func(w *world) client.Object {
			w.ready(w.proxmoxProvider())
			return w.vm("web-1", w.class(largestClass), w.image())
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionFalse, reason: infrav1.MachineTaskFailedReason,
		message: []string{"MAX 16 vcpus allowed per VM on this node"},
	},
	{
		name: "A VM of the largest VMClass the API allows is made on vSphere with exactly those values, none cut or overflowed.",
		arrange: func(w *world) client.Object {
			w.ready(w.vsphereProvider())
			return w.vm("web-1", w.class(largestClass), w.image())
		},
		condition: banlieuev1.ReadyCondition, status: metav1.ConditionTrue, reason: banlieuev1.VirtualMachineRunningReason,
		then: func(g Gomega, w *world, obj client.Object) {
			vm := w.vsphereVM(g, obj.(*banlieuev1.VirtualMachine))
			g.Expect(vm.Config.Hardware.NumCPU).To(BeEquivalentTo(768))
			g.Expect(vm.Config.Hardware.MemoryMB).To(BeEquivalentTo(25165824))
			var disks []int64
			for _, d := range vm.Config.Hardware.Device {
				if disk, ok := d.(*types.VirtualDisk); ok {
					disks = append(disks, disk.CapacityInKB>>20)
				}
			}
			g.Expect(disks).To(Equal([]int64{65536}))
		},
	},
}

// largestClass makes a VMClass as large as the API allows: vSphere 8's maxima of 768
// vCPUs and 24 TiB of memory, and a 64 TiB disk.
func largestClass(c *banlieuev1.VMClass) {
	c.Spec.Hardware.CPUs, c.Spec.Hardware.MemoryMiB = 768, 25165824
	c.Spec.Hardware.Disks[0].SizeGiB = 65536
}

// machineNamedAfter checks the machine core made for the VM obj: of kind gvk, named as
// the VM, controlled by it, with labels Kubernetes accepts (a label value derived from
// a 253-character name would not be).
func machineNamedAfter(g Gomega, w *world, obj client.Object, gvk schema.GroupVersionKind) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	g.Expect(k8sClient.Get(w.ctx, client.ObjectKeyFromObject(obj), m)).To(Succeed())
	g.Expect(m.Name).To(HaveLen(len(obj.GetName())))
	g.Expect(metav1.IsControlledBy(m, obj)).To(BeTrue(), "owner references %+v", m.OwnerReferences)
	for k, v := range m.Labels {
		g.Expect(validation.IsQualifiedName(k)).To(BeEmpty(), "label key %q", k)
		g.Expect(validation.IsValidLabelValue(v)).To(BeEmpty(), "label %s=%q", k, v)
	}
}

// noVSphereVM checks that the row's VM was not made on vCenter.
func noVSphereVM(g Gomega, w *world, obj client.Object) {
	m := &infrav1.VSphereMachine{}
	g.Expect(k8sClient.Get(w.ctx, client.ObjectKeyFromObject(obj), m)).To(Succeed())
	vms, err := w.vs.VMsWithUID(w.ctx, string(m.UID))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(vms).To(BeEmpty(), "VMs on vCenter for machine %s", m.Name)
}

// hostnameOf returns the local-hostname a meta-data document sets, unquoted.
func hostnameOf(metadata string) string {
	for _, line := range strings.Split(metadata, "\n") {
		if v, ok := strings.CutPrefix(line, "local-hostname: "); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return ""
}

func TestHostileManifestsAreReported(t *testing.T) {
	needAPIServer(t)
	c := startControllers(t)
	t.Run("rows", func(t *testing.T) {
		for _, tc := range reportedCases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, c)
			})
		}
	})
	if t.Failed() {
		c.healthy(t)
		return
	}
	// After all of that, the controllers still run and still make VMs.
	t.Run("The controllers still run and place a sound VM on each backend.", func(t *testing.T) {
		w := newWorld(t, c)
		w.ready(w.vsphereProvider())
		w.ready(w.proxmoxProvider(func(p *banlieuev1.Provider, _ *corev1.Secret) { p.Labels["test"] = w.ns + "-pve" }))
		class, img := w.class(), w.image()
		vms := []*banlieuev1.VirtualMachine{
			w.vm("on-vsphere", class, img),
			w.vm("on-proxmox", class, img, func(vm *banlieuev1.VirtualMachine) {
				vm.Spec.Placement.ProviderSelector.MatchLabels["test"] = w.ns + "-pve"
			}),
		}
		for _, vm := range vms {
			w.g.Eventually(func(g Gomega) {
				g.Expect(k8sClient.Get(w.ctx, client.ObjectKeyFromObject(vm), vm)).To(Succeed())
				g.Expect(meta.IsStatusConditionTrue(vm.Status.Conditions, banlieuev1.ReadyCondition)).To(BeTrue(), "conditions %+v", vm.Status.Conditions)
			}).WithTimeout(60 * time.Second).Should(Succeed())
		}
	})
	c.healthy(t)
	if n := len(invalidCases) + len(reportedCases); n < 50 {
		t.Errorf("only %d hostile manifests (%d rejected, %d reported); the suite promises at least 50", n, len(invalidCases), len(reportedCases))
	}
}

// run arranges the row and waits until its condition says what it must.
func (tc reportedCase) run(t *testing.T, c *controllers) {
	t.Helper()
	w := newWorld(t, c)
	obj := tc.arrange(w)
	check := func(g Gomega) {
		g.Expect(k8sClient.Get(w.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		cond := meta.FindStatusCondition(conditions(obj), tc.condition)
		g.Expect(cond).NotTo(BeNil(), "no %s condition; conditions %+v", tc.condition, conditions(obj))
		g.Expect(fmt.Sprintf("%s %s/%s", tc.condition, cond.Status, cond.Reason)).To(Equal(fmt.Sprintf("%s %s/%s", tc.condition, tc.status, tc.reason)), "message %q", cond.Message)
		for _, want := range tc.message {
			g.Expect(cond.Message).To(ContainSubstring(want))
		}
		if tc.status == metav1.ConditionFalse {
			g.Expect(cond.Message).NotTo(BeEmpty())
		}
		for _, c := range conditions(obj) {
			for _, secret := range w.secrets {
				g.Expect(c.Message).NotTo(ContainSubstring(secret), "condition %s shows a credential", c.Type)
			}
		}
		if tc.then != nil {
			tc.then(g, w, obj)
		}
	}
	w.g.Eventually(check).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	cond := meta.FindStatusCondition(conditions(obj), tc.condition)
	t.Logf("%s %s/%s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
}

// vsphereVM returns the vCenter VM of the VM's machine.
func (w *world) vsphereVM(g Gomega, vm *banlieuev1.VirtualMachine) mo.VirtualMachine {
	m := &infrav1.VSphereMachine{}
	g.Expect(k8sClient.Get(w.ctx, client.ObjectKeyFromObject(vm), m)).To(Succeed())
	vms, err := w.vs.VMsWithUID(context.Background(), string(m.UID))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(vms).To(HaveLen(1), "VMs on vCenter for machine %s", m.Name)
	return vms[0]
}

// proxmoxVM returns the configuration of the Proxmox VM of the VM's machine.
func (w *world) proxmoxVM(g Gomega, vm *banlieuev1.VirtualMachine) map[string]string {
	m := &infrav1.ProxmoxMachine{}
	g.Expect(k8sClient.Get(w.ctx, client.ObjectKeyFromObject(vm), m)).To(Succeed())
	g.Expect(m.Status.Proxmox).NotTo(BeNil())
	conf, ok := w.pve.VM(int(m.Status.Proxmox.VMID))
	g.Expect(ok).To(BeTrue(), "VM %d of machine %s", m.Status.Proxmox.VMID, m.Name)
	return conf
}
