package builder

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

func TestVMClass(t *testing.T) {
	tests := []struct {
		name string
		got  *banlieuev1.VMClass
		want banlieuev1.VMClassSpec
	}{
		{
			name: "no options give the shared defaults",
			got:  VMClass("small"),
			want: banlieuev1.VMClassSpec{
				Hardware: banlieuev1.Hardware{CPUs: 2, MemoryMiB: 2048, Disks: []banlieuev1.Disk{{Name: "root", SizeGiB: 20, StorageClass: "fast"}}},
				Network:  banlieuev1.Network{Interfaces: []banlieuev1.Interface{{Name: "eth0", NetworkClass: "prod"}}},
			},
		},
		{
			name: "options replace the hardware, disks and interfaces in order",
			got: VMClass("small", WithHardware(1, 512),
				WithDisks(banlieuev1.Disk{Name: "root", SizeGiB: 10, StorageClass: "fast-ssd"}),
				WithInterfaces(banlieuev1.Interface{Name: "eth0", NetworkClass: "prod-net"}, banlieuev1.Interface{Name: "eth1", NetworkClass: "backend"}),
				func(c *banlieuev1.VMClass) { c.Spec.Hardware.CPUs = 4 }),
			want: banlieuev1.VMClassSpec{
				Hardware: banlieuev1.Hardware{CPUs: 4, MemoryMiB: 512, Disks: []banlieuev1.Disk{{Name: "root", SizeGiB: 10, StorageClass: "fast-ssd"}}},
				Network:  banlieuev1.Network{Interfaces: []banlieuev1.Interface{{Name: "eth0", NetworkClass: "prod-net"}, {Name: "eth1", NetworkClass: "backend"}}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got.Name != "small" {
				t.Errorf("name = %q, want small", tt.got.Name)
			}
			if diff := cmp.Diff(tt.want, tt.got.Spec); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVMImage(t *testing.T) {
	got := VMImage("ubuntu", Template("vsphere", "tpl"), BackingFile("libvirt", "pool/jammy.qcow2"))
	want := &banlieuev1.VMImage{
		ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"},
		Spec: banlieuev1.VMImageSpec{Sources: []banlieuev1.ImageSource{
			{ProviderClass: "vsphere", Kind: banlieuev1.ImageSourceTemplate, Ref: "tpl"},
			{ProviderClass: "libvirt", Kind: banlieuev1.ImageSourceBackingFile, Ref: "pool/jammy.qcow2"},
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("VMImage (-want +got):\n%s", diff)
	}
}

func TestVirtualMachine(t *testing.T) {
	base := func() *banlieuev1.VirtualMachine {
		return &banlieuev1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1"},
			Spec: banlieuev1.VirtualMachineSpec{
				ClassRef: banlieuev1.LocalObjectReference{Name: "small"},
				ImageRef: banlieuev1.LocalObjectReference{Name: "ubuntu"},
			},
		}
	}
	selected, userData := base(), base()
	selected.Spec.Placement.ProviderSelector = &banlieuev1.LabelSelector{MatchLabels: map[string]string{"test": "ns"}}
	userData.Spec.UserData = banlieuev1.UserData{SecretRef: banlieuev1.LocalObjectReference{Name: "cloud-init"}, Key: "user-data"}
	tests := []struct {
		name string
		opts []func(*banlieuev1.VirtualMachine)
		want *banlieuev1.VirtualMachine
	}{
		{name: "no options place it on any Provider", want: base()},
		{name: "a provider selector with no labels places it on any Provider", opts: []func(*banlieuev1.VirtualMachine){WithProviderSelector(nil)}, want: base()},
		{name: "a provider selector with labels places it on the Providers that carry them", opts: []func(*banlieuev1.VirtualMachine){WithProviderSelector(map[string]string{"test": "ns"})}, want: selected},
		{name: "user data names the Secret and its key", opts: []func(*banlieuev1.VirtualMachine){WithUserData("cloud-init", "user-data")}, want: userData},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, VirtualMachine("ns", "web-1", "small", "ubuntu", tt.opts...)); diff != "" {
				t.Errorf("VirtualMachine (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProvider(t *testing.T) {
	got := Provider("infra", "vcenter", "vsphere",
		WithLabels(map[string]string{"env": "dev"}),
		WithConnection(banlieuev1.Connection{Endpoint: "https://vc/sdk"}),
		WithTestClasses("datastore", "ds1", "network", "VM Network", "DVPG"),
		WithStorageClass("slow", map[string]string{"datastore": "ds2"}),
		WithFeatures("efiSecureBoot"),
		WithParameters(map[string]string{"datacenter": "DC0"}))
	want := &banlieuev1.Provider{
		ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "vcenter", Labels: map[string]string{"env": "dev"}},
		Spec: banlieuev1.ProviderSpec{
			ProviderClassRef: banlieuev1.LocalObjectReference{Name: "vsphere"},
			Connection:       banlieuev1.Connection{Endpoint: "https://vc/sdk"},
			Capabilities: banlieuev1.Capabilities{
				StorageClasses: []banlieuev1.ClassMapping{{Name: "fast", Target: map[string]string{"datastore": "ds1"}}, {Name: "slow", Target: map[string]string{"datastore": "ds2"}}},
				NetworkClasses: []banlieuev1.ClassMapping{{Name: "prod", Target: map[string]string{"network": "VM Network"}}, {Name: "backend", Target: map[string]string{"network": "DVPG"}}},
				Features:       []string{"efiSecureBoot"},
			},
			Parameters: map[string]string{"datacenter": "DC0"},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Provider (-want +got):\n%s", diff)
	}
}

func TestSecret(t *testing.T) {
	want := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"}, Data: map[string][]byte{"password": []byte("p")}}
	if diff := cmp.Diff(want, Secret("ns", "creds", map[string][]byte{"password": []byte("p")})); diff != "" {
		t.Errorf("Secret (-want +got):\n%s", diff)
	}
}

func TestFailureDomain(t *testing.T) {
	tests := []struct {
		name  string
		kv    []string
		wants map[string]string
	}{
		{name: "no labels are an empty map", kv: nil, wants: map[string]string{}},
		{name: "key, value pairs are labels", kv: []string{"zone", "a", "host", "h1"}, wants: map[string]string{"zone": "a", "host": "h1"}},
		{name: "an odd last key is left out", kv: []string{"zone", "a", "host"}, wants: map[string]string{"zone": "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := banlieuev1.FailureDomain{Name: "fd-a", Labels: tt.wants}
			if diff := cmp.Diff(want, FailureDomain("fd-a", tt.kv...)); diff != "" {
				t.Errorf("FailureDomain (-want +got):\n%s", diff)
			}
		})
	}
}
