package vspheretest

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/simulator"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	vspheresim "github.com/banlieue/banlieue/sim/vsphere"
)

// Names in the simulator's inventory (govmomi's VPX model plus the template).
const (
	// Datacenter is the datacenter's name.
	Datacenter = vspheresim.Datacenter
	// Cluster is the first compute cluster's name.
	Cluster = vspheresim.Cluster
	// Datastore is the datastore every host mounts.
	Datastore = vspheresim.Datastore
	// Network is the standard port group every host has.
	Network = vspheresim.Network
	// PortGroup is the first distributed port group.
	PortGroup = vspheresim.PortGroup
	// TemplateName is the template Start makes in Cluster: 2 CPUs, 2048 MiB, a 10 GiB
	// disk on a paravirtual SCSI controller and a vmxnet3 NIC on Network.
	TemplateName = vspheresim.DefaultTemplate
	// TemplateDiskGiB is the size of the template's disk.
	TemplateDiskGiB = vspheresim.TemplateDiskGiB
	// Username is the vCenter user the simulator accepts.
	Username = vspheresim.DefaultUsername
)

// Task names of vcsim for Simulator.DelayTask.
const (
	// TaskClone is vcsim's name of CloneVM_Task.
	TaskClone = "CloneVm"
	// TaskPowerOff is vcsim's name of PowerOffVM_Task.
	TaskPowerOff = "PowerOff"
	// TaskPowerOn is vcsim's name of PowerOnVM_Task.
	TaskPowerOn = "PowerOn"
	// TaskReconfigure is vcsim's name of ReconfigVM_Task.
	TaskReconfigure = "ReconfigVm"
	// TaskDestroy is vcsim's name of Destroy_Task.
	TaskDestroy = "Destroy"
)

// Simulator is a vcsim vCenter serving TLS on loopback.
type Simulator struct {
	// URL is the SDK endpoint, https://127.0.0.1:<port>/sdk.
	URL string
	// Username and Password are the credentials the simulator accepts, and no others.
	Username, Password string
	// CAPEM is the PEM certificate of the CA that signed the simulator's certificate.
	CAPEM []byte
	// Client is the simulator's own session, for assertions; Sessions does not count it
	// and Restart does not end it.
	Client *govmomi.Client
	// TemplateRef is the template's managed object ID, e.g. vm-80.
	TemplateRef string

	sim *vspheresim.Simulator
}

// Option changes the simulator before it starts.
type Option func(*simulator.Model)

// WithModel lets a test change govmomi's VPX model, e.g. to add clusters or datacenters.
func WithModel(f func(*simulator.Model)) Option { return Option(f) }

// Start starts a simulator for the test and stops it when the test ends. Its guests
// report no address until the test sets one with SetGuestIP, so that a test decides
// when a VM has one.
func Start(tb testing.TB, opts ...Option) *Simulator {
	tb.Helper()
	sim, err := vspheresim.Start(vspheresim.Options{
		// govmomi's VPX model as it comes, which the driver's tests are written against:
		// one cluster of three hosts, and a standalone host DC0_H0 with VMs that are not
		// templates (DC0_H0_VM0…).
		Clusters:          1,
		HostsPerCluster:   3,
		Templates:         []string{TemplateName},
		GuestAddressDelay: -1,
		Username:          Username,
		Password:          rand.Text(),
		Model: func(m *simulator.Model) {
			m.Host, m.Machine = 1, 2
			for _, o := range opts {
				o(m)
			}
		},
	})
	if err != nil {
		tb.Fatalf("failed to start vcsim: %v", err)
	}
	tb.Cleanup(sim.Stop)
	return &Simulator{
		URL:         sim.URL.String(),
		Username:    sim.Username,
		Password:    sim.Password,
		CAPEM:       sim.CACert,
		Client:      sim.OwnClient(),
		TemplateRef: sim.TemplateRefs[TemplateName],
		sim:         sim,
	}
}

// NewCA returns the PEM certificate of a fresh CA that signed nothing: a CA bundle the
// simulator's certificate does not verify against.
func NewCA() ([]byte, error) { return vspheresim.NewCA() }

// Stop makes the simulator unreachable: its address refuses connections and open
// connections are cut. The simulated vCenter keeps its state.
func (s *Simulator) Stop() { s.sim.Down() }

// Restart makes a stopped simulator reachable again on the same address. Like a real
// vCenter restart, it ends every session but the test's own.
func (s *Simulator) Restart(ctx context.Context) error { return s.sim.Restart(ctx) }

// Sessions counts the simulator's sessions, without the test's own.
func (s *Simulator) Sessions(ctx context.Context) (int, error) {
	sessions, err := s.sim.Sessions(ctx)
	return len(sessions), err
}

// TerminateSessions ends every session but the test's own, as a vCenter restart or an
// expired session would.
func (s *Simulator) TerminateSessions(ctx context.Context) error {
	return s.sim.TerminateSessions(ctx)
}

// DelayTask makes every vcsim task named name (TaskClone, for one) wait d before it
// runs, until the test ends. VMs stay readable meanwhile. Task delays are process-wide.
func DelayTask(tb testing.TB, name string, d time.Duration) {
	tb.Helper()
	prev := simulator.TaskDelay.MethodDelay
	delays := map[string]int{"LockHandoff": 0}
	for k, v := range prev {
		delays[k] = v
	}
	delays[name] = int(d / time.Millisecond)
	simulator.TaskDelay.MethodDelay = delays
	tb.Cleanup(func() { simulator.TaskDelay.MethodDelay = prev })
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
		CredentialsRef: banlieuev1.LocalObjectReference{Name: secretName},
		CABundle:       &banlieuev1.CABundle{Inline: string(s.CAPEM)},
	}
}
