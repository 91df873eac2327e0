package vsphere

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

// The template sits in the first cluster, and vcsim keeps a clone on the template's host
// unless the clone names one: a VM for the second cluster must still run there.
func TestACloneRunsOnAHostOfItsFailureDomainsCluster(t *testing.T) {
	sim := vspheretest.Start(t, vspheretest.WithModel(func(m *simulator.Model) { m.Cluster = 2 }))
	s := connect(t, sim, NewDriver())
	tests := []struct {
		uid, failureDomain, cluster string
	}{
		{uid: "0c1d2e3f-4a5b-4c6d-8e7f-001122334455", failureDomain: "dc0-dc0-c0", cluster: "DC0_C0"},
		{uid: "1d2e3f4a-5b6c-4d7e-8f90-112233445566", failureDomain: "dc0-dc0-c1", cluster: "DC0_C1"},
	}
	for _, tt := range tests {
		t.Run(tt.failureDomain, func(t *testing.T) {
			m := newMachine(tt.uid)
			m.Spec.FailureDomain = tt.failureDomain
			res, err := afterObserve(s, m, s.Create)
			check(t, err)
			o := settle(t, s, m, res.Task)
			if o.FailureDomain != tt.failureDomain {
				t.Errorf("Observation.FailureDomain = %q, want %q", o.FailureDomain, tt.failureDomain)
			}
			vm := theVM(t, sim, tt.uid)
			if got := clusterOfHost(t, sim, vm); got != tt.cluster {
				t.Errorf("the VM runs on a host of cluster %q, want %q", got, tt.cluster)
			}
		})
	}
}

func TestCreateWaitsForAHostOutOfMaintenanceMode(t *testing.T) {
	sim := vspheretest.Start(t, vspheretest.WithModel(func(m *simulator.Model) { m.Cluster = 2 }))
	ctx := context.Background()
	finder := find.NewFinder(sim.Client.Client)
	hosts, err := finder.HostSystemList(ctx, "/DC0/host/DC0_C1/*")
	check(t, err)
	for _, h := range hosts {
		task, err := h.EnterMaintenanceMode(ctx, 0, false, nil)
		check(t, err)
		check(t, task.Wait(ctx))
	}
	s := connect(t, sim, NewDriver())
	m := newMachine("2e3f4a5b-6c7d-4e8f-9a01-223344556677")
	m.Spec.FailureDomain = "dc0-dc0-c1"
	_, err = afterObserve(s, m, s.Create)
	var retry *providersdk.RetryableError
	if !errors.As(err, &retry) || retry.Reason != infrav1.MachinePlacementInvalidReason {
		t.Fatalf("Create with every host of the cluster in maintenance = %v; want a retryable %s", err, infrav1.MachinePlacementInvalidReason)
	}
	if vms, err := sim.VMsWithUID(ctx, string(m.UID)); err != nil || len(vms) != 0 {
		t.Errorf("VMs with the machine's UID = %d, %v; want none", len(vms), err)
	}
}

func TestPickHost(t *testing.T) {
	h := func(n string) vcenter.Ref { return vcenter.Ref{Type: "HostSystem", Value: n} }
	ds := func(n string) vcenter.Ref { return vcenter.Ref{Type: "Datastore", Value: n} }
	fd := &failureDomain{name: "dc-c1", hosts: []clusterHost{
		{ref: h("host-1"), datastores: []vcenter.Ref{ds("shared")}},
		{ref: h("host-2"), datastores: []vcenter.Ref{ds("shared"), ds("local-2")}},
	}}
	tests := []struct {
		name      string
		fd        *failureDomain
		datastore *vcenter.Datastore
		want      []vcenter.Ref // the hosts the pick may be
		wantErr   bool
	}{
		{name: "any usable host without a datastore", fd: fd, want: []vcenter.Ref{h("host-1"), h("host-2")}},
		{name: "a host that mounts the datastore", fd: fd, datastore: &vcenter.Datastore{Ref: ds("local-2"), Name: "local-2"}, want: []vcenter.Ref{h("host-2")}},
		{name: "no host mounts the datastore", fd: fd, datastore: &vcenter.Datastore{Ref: ds("other"), Name: "other"}, wantErr: true},
		{name: "no usable host", fd: &failureDomain{name: "dc-c2"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.fd.pickHost("team-a-web", tt.datastore)
			if tt.wantErr {
				var retry *providersdk.RetryableError
				if !errors.As(err, &retry) {
					t.Fatalf("pickHost = %v, %v; want a retryable error", got, err)
				}
				return
			}
			check(t, err)
			if !slices.Contains(tt.want, got) {
				t.Errorf("pickHost = %v, want one of %v", got, tt.want)
			}
			if again, _ := tt.fd.pickHost("team-a-web", tt.datastore); again != got {
				t.Errorf("pickHost picked %v then %v for the same name; want the same host", got, again)
			}
		})
	}
}

// clusterOfHost is the name of the compute cluster of the VM's host, read from vcsim.
func clusterOfHost(t *testing.T, sim *vspheretest.Simulator, vm mo.VirtualMachine) string {
	t.Helper()
	ctx := context.Background()
	if vm.Runtime.Host == nil {
		t.Fatalf("VM %s has no host", vm.Name)
	}
	var host mo.HostSystem
	check(t, object.NewHostSystem(sim.Client.Client, *vm.Runtime.Host).Properties(ctx, *vm.Runtime.Host, []string{"parent"}, &host))
	if host.Parent == nil || host.Parent.Type != "ClusterComputeResource" {
		t.Fatalf("host %s of VM %s is in no cluster (parent %v)", vm.Runtime.Host.Value, vm.Name, host.Parent)
	}
	var cluster mo.ClusterComputeResource
	check(t, object.NewClusterComputeResource(sim.Client.Client, *host.Parent).Properties(ctx, *host.Parent, []string{"name"}, &cluster))
	return cluster.Name
}
