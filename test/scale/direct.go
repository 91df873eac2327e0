package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	goproxmox "github.com/luthermonson/go-proxmox"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"
	"libvirt.org/go/libvirtxml"

	"github.com/banlieue/banlieue/internal/devenv"
	"github.com/banlieue/banlieue/providers/libvirt"
	vspheresim "github.com/banlieue/banlieue/sim/vsphere"
)

// The VM the class describes, as the direct paths make it.
const (
	directCPUs      = 1
	directMemoryMiB = 512
	directDiskGiB   = 10
	// directTaskPoll is how often the direct Proxmox VE path polls a task.
	directTaskPoll = 100 * time.Millisecond
)

// directWorkers bounds the direct path's creations in flight per backend. Each holds a
// connection at both ends in this process (the simulators run here), so thousands at
// once run out of file descriptors; a client script creating thousands of VMs runs a
// bounded pool too. Up to this many the creations are all at once.
const directWorkers = 256

// parallel runs f for 0…n-1, directWorkers at a time, and joins the errors.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	slots := make(chan struct{}, directWorkers)
	var wg sync.WaitGroup
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// directVSphere clones the template n times with govmomi, powered on, directWorkers at
// a time.
func (b *bench) directVSphere(ctx context.Context, n int) error {
	c, err := b.sims.VSphere.Client(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Logout(context.Background()) }()
	finder := find.NewFinder(c.Client)
	folder, err := finder.Folder(ctx, "/"+vspheresim.Datacenter+"/vm")
	if err != nil {
		return err
	}
	pool, err := finder.ResourcePool(ctx, "/"+vspheresim.Datacenter+"/host/"+vspheresim.Cluster+"/Resources")
	if err != nil {
		return err
	}
	poolRef := pool.Reference()
	tpl := object.NewVirtualMachine(c.Client, types.ManagedObjectReference{Type: "VirtualMachine", Value: b.sims.VSphere.TemplateRefs[devenv.VSphereTemplate]})
	return parallel(n, func(i int) error {
		spec := types.VirtualMachineCloneSpec{
			Location: types.VirtualMachineRelocateSpec{Pool: &poolRef},
			Config:   &types.VirtualMachineConfigSpec{NumCPUs: directCPUs, MemoryMB: directMemoryMiB},
			PowerOn:  true,
		}
		task, err := tpl.Clone(ctx, folder, fmt.Sprintf("direct-%05d", i), spec)
		if err != nil {
			return err
		}
		return task.Wait(ctx)
	})
}

// directProxmox clones the template n times with go-proxmox, directWorkers at a time: a full clone
// onto the Provider's storage, the class's CPUs and memory, then a start, waiting for
// each task as a careful client does.
func (b *bench) directProxmox(ctx context.Context, n int) error {
	sim := b.sims.Proxmox
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(sim.CACert)
	c := goproxmox.NewClient(sim.URL, goproxmox.WithAPIToken(sim.TokenID, sim.TokenSecret), goproxmox.WithRootCAs(roots))
	node, err := c.Node(ctx, "pve1")
	if err != nil {
		return err
	}
	tpl, err := node.VirtualMachine(ctx, 9000)
	if err != nil {
		return err
	}
	cluster, err := c.Cluster(ctx)
	if err != nil {
		return err
	}
	return parallel(n, func(i int) error {
		vmid, err := cloneWithNewID(ctx, cluster, tpl, fmt.Sprintf("direct-%05d", i))
		if err != nil {
			return err
		}
		vm, err := node.VirtualMachine(ctx, vmid)
		if err != nil {
			return err
		}
		task, err := vm.Config(ctx, goproxmox.VirtualMachineOption{Name: "cores", Value: directCPUs}, goproxmox.VirtualMachineOption{Name: "memory", Value: directMemoryMiB})
		if err == nil {
			err = task.Wait(ctx, directTaskPoll, time.Minute)
		}
		if err != nil {
			return fmt.Errorf("failed to configure VM %d: %w", vmid, err)
		}
		if task, err = vm.Start(ctx); err == nil {
			err = task.Wait(ctx, directTaskPoll, time.Minute)
		}
		if err != nil {
			return fmt.Errorf("failed to start VM %d: %w", vmid, err)
		}
		return nil
	})
}

// cloneWithNewID clones tpl onto the next free VMID and waits for the clone. Clients
// cloning at the same moment are handed the same VMID; the losers ask again.
func cloneWithNewID(ctx context.Context, cluster *goproxmox.Cluster, tpl *goproxmox.VirtualMachine, name string) (int, error) {
	for {
		vmid, err := cluster.NextID(ctx)
		if err != nil {
			return 0, err
		}
		_, task, err := tpl.Clone(ctx, &goproxmox.VirtualMachineCloneOptions{NewID: vmid, Name: name, Full: true, Storage: "local-lvm"})
		if err != nil && strings.Contains(err.Error(), "already exists") {
			continue
		}
		if err == nil {
			err = task.Wait(ctx, directTaskPoll, 5*time.Minute)
		}
		if err != nil {
			return 0, fmt.Errorf("failed to clone %s: %w", name, err)
		}
		return vmid, nil
	}
}

// directLibvirt defines n domains with go-libvirt, directWorkers at a time, each with a qcow2
// overlay of the image, left shut off as banlieue's libvirt VMs are here. go-libvirt
// takes no context.
func (b *bench) directLibvirt(_ context.Context, n int) error {
	l, err := b.sims.Libvirt.Connect("qemu:///system")
	if err != nil {
		return err
	}
	defer func() { _ = l.Disconnect() }()
	poolName, imgName, _ := strings.Cut(devenv.LibvirtImage, "/")
	pool, err := l.StoragePoolLookupByName(poolName)
	if err != nil {
		return err
	}
	img, err := l.StorageVolLookupByName(pool, imgName)
	if err != nil {
		return err
	}
	imgPath, err := l.StorageVolGetPath(img)
	if err != nil {
		return err
	}
	network := ""
	for _, obj := range b.sims.Objects() {
		if p := providerOf(obj, libvirt.ProviderClass); p != nil {
			network = p.Spec.Capabilities.NetworkClasses[0].Target[libvirt.TargetNetwork]
		}
	}
	return parallel(n, func(i int) error {
		name := fmt.Sprintf("direct-%05d", i)
		vol, err := (&libvirtxml.StorageVolume{
			Name:         name + ".qcow2",
			Capacity:     &libvirtxml.StorageVolumeSize{Unit: "GiB", Value: directDiskGiB},
			Target:       &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
			BackingStore: &libvirtxml.StorageVolumeBackingStore{Path: imgPath, Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
		}).Marshal()
		if err != nil {
			return err
		}
		created, err := l.StorageVolCreateXML(pool, vol, 0)
		if err != nil {
			return err
		}
		disk, err := l.StorageVolGetPath(created)
		if err != nil {
			return err
		}
		dom, err := (&libvirtxml.Domain{
			Type: "qemu", Name: name,
			Memory: &libvirtxml.DomainMemory{Value: directMemoryMiB, Unit: "MiB"},
			VCPU:   &libvirtxml.DomainVCPU{Value: directCPUs},
			OS:     &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm"}},
			Devices: &libvirtxml.DomainDeviceList{
				Disks: []libvirtxml.DomainDisk{{
					Device: "disk",
					Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2"},
					Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: disk}},
					Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
				}},
				Interfaces: []libvirtxml.DomainInterface{{
					Source: &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: network}},
					Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
				}},
			},
		}).Marshal()
		if err != nil {
			return err
		}
		_, err = l.DomainDefineXMLFlags(dom, golibvirt.DomainDefineValidate)
		return err
	})
}
