// Package vspheretest runs a vCenter simulator (govmomi's vcsim) inside a test's process,
// serving TLS on loopback with a certificate from its own CA, with a template to clone
// from. Tests of the vSphere driver and the envtest suites that drive it use it.
//
// The simulator is one per test; its state lives in memory and goes with the test. Some of
// vcsim's knobs (task delays) are process-wide, so tests that use them must not run in
// parallel with other simulator tests.
package vspheretest

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// Names in the simulator's inventory (govmomi's VPX model plus the template).
const (
	// Datacenter is the datacenter's name.
	Datacenter = "DC0"
	// Cluster is the first compute cluster's name.
	Cluster = "DC0_C0"
	// Datastore is the datastore every host mounts.
	Datastore = "LocalDS_0"
	// Network is the standard port group every host has.
	Network = "VM Network"
	// PortGroup is the first distributed port group.
	PortGroup = "DC0_DVPG0"
	// TemplateName is the template Start makes: 2 CPUs, 2048 MiB, a 10 GiB disk on a
	// paravirtual SCSI controller and a vmxnet3 NIC on Network.
	TemplateName = "ubuntu-22.04"
	// TemplateDiskGiB is the size of the template's disk.
	TemplateDiskGiB = 10
	// Username is the vCenter user the simulator accepts.
	Username = "administrator@vsphere.local"
)

// Task names of vcsim for Simulator.DelayTask.
const (
	// TaskClone is vcsim's name of CloneVM_Task.
	TaskClone = "CloneVm"
	// TaskPowerOff is vcsim's name of PowerOffVM_Task.
	TaskPowerOff = "PowerOff"
	// TaskPowerOn is vcsim's name of PowerOnVM_Task.
	TaskPowerOn = "PowerOn"
)

// Simulator is a vcsim vCenter serving TLS on loopback.
type Simulator struct {
	// URL is the SDK endpoint, https://127.0.0.1:<port>/sdk.
	URL string
	// Username and Password are the credentials the simulator accepts, and no others.
	Username, Password string
	// CAPEM is the PEM certificate of the CA that signed the simulator's certificate.
	CAPEM []byte
	// Client is a session of the test's own, for assertions; Sessions does not count it.
	Client *govmomi.Client
	// TemplateRef is the template's managed object ID, e.g. vm-80.
	TemplateRef string

	model  *simulator.Model
	server *simulator.Server
	proxy  *proxy
	own    string
}

// Option changes the simulator before it starts.
type Option func(*simulator.Model)

// WithModel lets a test change govmomi's VPX model, e.g. to add clusters or datacenters.
func WithModel(f func(*simulator.Model)) Option { return Option(f) }

// Start starts a simulator for the test and stops it when the test ends.
func Start(t testing.TB, opts ...Option) *Simulator {
	t.Helper()
	s, err := start(opts...)
	if err != nil {
		t.Fatalf("failed to start vcsim: %v", err)
	}
	t.Cleanup(s.close)
	return s
}

func start(opts ...Option) (*Simulator, error) {
	model := simulator.VPX()
	for _, o := range opts {
		o(model)
	}
	if err := model.Create(); err != nil {
		return nil, fmt.Errorf("failed to create the vcsim model: %w", err)
	}
	s := &Simulator{model: model, Username: Username, Password: rand.Text()}
	caPEM, cert, err := newCertificates()
	if err != nil {
		model.Remove()
		return nil, err
	}
	s.CAPEM = caPEM
	model.Service.TLS = tlsConfig(cert)
	model.Service.Listen = &url.URL{User: url.UserPassword(s.Username, s.Password)}
	s.server = model.Service.NewServer()
	s.proxy = &proxy{target: s.server.Listener.Addr().String()}
	if err := s.proxy.start("127.0.0.1:0"); err != nil {
		s.close()
		return nil, err
	}
	s.URL = "https://" + s.proxy.addr + "/sdk"

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if s.Client, err = s.login(ctx); err != nil {
		s.close()
		return nil, err
	}
	if err := s.makeTemplate(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// login opens the test's own session, verifying the simulator's certificate.
func (s *Simulator) login(ctx context.Context) (*govmomi.Client, error) {
	u, err := soap.ParseURL(s.URL)
	if err != nil {
		return nil, err
	}
	sc := soap.NewClient(u, false)
	sc.DefaultTransport().TLSClientConfig.RootCAs = certPool(s.CAPEM)
	vc, err := vim25.NewClient(ctx, sc)
	if err != nil {
		return nil, fmt.Errorf("failed to connect to vcsim: %w", err)
	}
	c := &govmomi.Client{Client: vc, SessionManager: session.NewManager(vc)}
	if err := c.Login(ctx, url.UserPassword(s.Username, s.Password)); err != nil {
		return nil, fmt.Errorf("failed to log in to vcsim: %w", err)
	}
	us, err := c.SessionManager.UserSession(ctx)
	if err != nil || us == nil {
		return nil, fmt.Errorf("failed to read the test's vcsim session: %v", err)
	}
	s.own = us.Key
	return c, nil
}

// makeTemplate creates TemplateName in Cluster and marks it a template.
func (s *Simulator) makeTemplate(ctx context.Context) error {
	finder := find.NewFinder(s.Client.Client)
	folder, err := finder.Folder(ctx, "/"+Datacenter+"/vm")
	if err != nil {
		return fmt.Errorf("failed to find the VM folder: %w", err)
	}
	pool, err := finder.ResourcePool(ctx, "/"+Datacenter+"/host/"+Cluster+"/Resources")
	if err != nil {
		return fmt.Errorf("failed to find the cluster's pool: %w", err)
	}
	netRef, err := finder.Network(ctx, "/"+Datacenter+"/network/"+Network)
	if err != nil {
		return fmt.Errorf("failed to find the network: %w", err)
	}
	backing, err := netRef.EthernetCardBackingInfo(ctx)
	if err != nil {
		return fmt.Errorf("failed to read the network: %w", err)
	}
	nic, err := object.EthernetCardTypes().CreateEthernetCard("vmxnet3", backing)
	if err != nil {
		return fmt.Errorf("failed to make a NIC: %w", err)
	}
	nic.GetVirtualDevice().Key = -102
	unit := int32(0)
	spec := types.VirtualMachineConfigSpec{
		Name:     TemplateName,
		GuestId:  string(types.VirtualMachineGuestOsIdentifierUbuntu64Guest),
		NumCPUs:  2,
		MemoryMB: 2048,
		Files:    &types.VirtualMachineFileInfo{VmPathName: "[" + Datastore + "]"},
		DeviceChange: []types.BaseVirtualDeviceConfigSpec{
			&types.VirtualDeviceConfigSpec{
				Operation: types.VirtualDeviceConfigSpecOperationAdd,
				Device: &types.ParaVirtualSCSIController{VirtualSCSIController: types.VirtualSCSIController{
					SharedBus:         types.VirtualSCSISharingNoSharing,
					VirtualController: types.VirtualController{VirtualDevice: types.VirtualDevice{Key: -100}},
				}},
			},
			&types.VirtualDeviceConfigSpec{
				Operation:     types.VirtualDeviceConfigSpecOperationAdd,
				FileOperation: types.VirtualDeviceConfigSpecFileOperationCreate,
				Device: &types.VirtualDisk{
					VirtualDevice: types.VirtualDevice{
						Key: -101, ControllerKey: -100, UnitNumber: &unit,
						Backing: &types.VirtualDiskFlatVer2BackingInfo{
							VirtualDeviceFileBackingInfo: types.VirtualDeviceFileBackingInfo{FileName: "[" + Datastore + "]"},
							DiskMode:                     string(types.VirtualDiskModePersistent),
							ThinProvisioned:              types.NewBool(true),
						},
					},
					CapacityInKB: TemplateDiskGiB << 20,
				},
			},
			&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: nic},
		},
	}
	task, err := folder.CreateVM(ctx, spec, pool, nil)
	if err != nil {
		return fmt.Errorf("failed to create the template VM: %w", err)
	}
	info, err := task.WaitForResult(ctx)
	if err != nil {
		return fmt.Errorf("failed to create the template VM: %w", err)
	}
	ref := info.Result.(types.ManagedObjectReference)
	if err := object.NewVirtualMachine(s.Client.Client, ref).MarkAsTemplate(ctx); err != nil {
		return fmt.Errorf("failed to mark the template: %w", err)
	}
	s.TemplateRef = ref.Value
	return nil
}

// close stops everything Start started.
func (s *Simulator) close() {
	if s.Client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.Client.Logout(ctx)
		cancel()
	}
	if s.proxy != nil {
		s.proxy.stop()
	}
	if s.server != nil {
		s.server.Close()
	}
	s.model.Remove()
}

// Stop makes the simulator unreachable: its address refuses connections and open
// connections are cut. The simulated vCenter keeps its state.
func (s *Simulator) Stop() { s.proxy.stop() }

// Restart makes a stopped simulator reachable again on the same address. Like a real
// vCenter restart, it ends every session but the test's own.
func (s *Simulator) Restart(ctx context.Context) error {
	if err := s.proxy.start(s.proxy.addr); err != nil {
		return err
	}
	// The test's connections were cut by Stop; dial afresh rather than write to them.
	s.Client.Client.Client.CloseIdleConnections()
	return s.TerminateSessions(ctx)
}

// Sessions counts the simulator's sessions, without the test's own.
func (s *Simulator) Sessions(ctx context.Context) (int, error) {
	keys, err := s.sessionKeys(ctx)
	return len(keys), err
}

// TerminateSessions ends every session but the test's own, as a vCenter restart or an
// expired session would.
func (s *Simulator) TerminateSessions(ctx context.Context) error {
	keys, err := s.sessionKeys(ctx)
	if err != nil || len(keys) == 0 {
		return err
	}
	if err := s.Client.SessionManager.TerminateSession(ctx, keys); err != nil {
		return fmt.Errorf("failed to terminate sessions: %w", err)
	}
	return nil
}

func (s *Simulator) sessionKeys(ctx context.Context) ([]string, error) {
	var sm mo.SessionManager
	if err := property.DefaultCollector(s.Client.Client).RetrieveOne(ctx, *s.Client.ServiceContent.SessionManager, []string{"sessionList"}, &sm); err != nil {
		return nil, fmt.Errorf("failed to list sessions: %w", err)
	}
	var keys []string
	for _, us := range sm.SessionList {
		if us.Key != s.own {
			keys = append(keys, us.Key)
		}
	}
	return keys, nil
}

// DelayTask makes every vcsim task named name (TaskClone, for one) wait d before it
// runs, until the test ends. VMs stay readable meanwhile. Task delays are process-wide.
func DelayTask(t testing.TB, name string, d time.Duration) {
	t.Helper()
	prev := simulator.TaskDelay.MethodDelay
	delays := map[string]int{"LockHandoff": 0}
	for k, v := range prev {
		delays[k] = v
	}
	delays[name] = int(d / time.Millisecond)
	simulator.TaskDelay.MethodDelay = delays
	t.Cleanup(func() { simulator.TaskDelay.MethodDelay = prev })
}

// Credentials is the data of a credentials Secret for the simulator.
func (s *Simulator) Credentials() map[string][]byte {
	return map[string][]byte{"username": []byte(s.Username), "password": []byte(s.Password)}
}

// CredentialsSecret is a credentials Secret for the simulator.
func (s *Simulator) CredentialsSecret(namespace, name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Data:       s.Credentials(),
	}
}

// Connection is a Provider connection to the simulator that verifies its certificate
// against the inline CA bundle and reads credentials from the Secret named secretName.
func (s *Simulator) Connection(secretName string) banlieuev1.Connection {
	return banlieuev1.Connection{
		Endpoint:       s.URL,
		CredentialsRef: &banlieuev1.LocalObjectReference{Name: secretName},
		CABundle:       &banlieuev1.CABundle{Inline: string(s.CAPEM)},
	}
}
