package builder

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// VMClass returns a VMClass named name with 2 CPUs, 2048 MiB of memory, a 20 GiB root
// disk of storage class fast and an interface eth0 on network class prod, changed by opts.
func VMClass(name string, opts ...func(*banlieuev1.VMClass)) *banlieuev1.VMClass {
	c := &banlieuev1.VMClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: banlieuev1.VMClassSpec{
			Hardware: banlieuev1.Hardware{CPUs: 2, MemoryMiB: 2048, Disks: []banlieuev1.Disk{{Name: "root", SizeGiB: 20, StorageClass: "fast"}}},
			Network:  banlieuev1.Network{Interfaces: []banlieuev1.Interface{{Name: "eth0", NetworkClass: "prod"}}},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithHardware sets a VMClass's number of CPUs and its memory.
func WithHardware(cpus int32, memoryMiB int64) func(*banlieuev1.VMClass) {
	return func(c *banlieuev1.VMClass) {
		c.Spec.Hardware.CPUs, c.Spec.Hardware.MemoryMiB = cpus, memoryMiB
	}
}

// WithDisks replaces a VMClass's disks with disks.
func WithDisks(disks ...banlieuev1.Disk) func(*banlieuev1.VMClass) {
	return func(c *banlieuev1.VMClass) { c.Spec.Hardware.Disks = disks }
}

// WithInterfaces replaces a VMClass's network interfaces with interfaces.
func WithInterfaces(interfaces ...banlieuev1.Interface) func(*banlieuev1.VMClass) {
	return func(c *banlieuev1.VMClass) { c.Spec.Network.Interfaces = interfaces }
}
