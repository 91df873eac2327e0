package proxmoxtest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
)

// Names in the simulated cluster.
const (
	// Cluster is the cluster's name.
	Cluster = proxmoxsim.ClusterName
	// Node1 serves the API and holds the template.
	Node1 = "pve1"
	// Node2 is the second node.
	Node2 = "pve2"
	// Storage holds VM disks on every node (LVM-thin, not shared).
	Storage = "local-lvm"
	// SnippetsStorage holds snippets, ISOs and imports on every node (a directory).
	SnippetsStorage = "local"
	// Bridge is the bridge every node has.
	Bridge = "vmbr0"
	// TemplateName is the template Start makes on Node1: 2 cores, 2048 MiB, a 10 GiB
	// scsi0 disk on Storage, a cloud-init drive, a virtio NIC on Bridge, the guest agent on.
	TemplateName = proxmoxsim.DefaultTemplate
	// TemplateVMID is the template's VMID.
	TemplateVMID = proxmoxsim.FirstTemplateVMID
	// TemplateDiskGiB is the size of the template's disk.
	TemplateDiskGiB = 10
)

// Simulator is a simulated PVE cluster serving HTTPS on loopback.
type Simulator struct {
	*proxmoxsim.Simulator
}

// Option changes the simulator's options before it starts.
type Option func(*proxmoxsim.Options)

// Start starts a simulator for the test and stops it when the test ends. Tasks finish
// after 20ms, the cluster listing lags 50ms behind (pvestatd's 10s, shortened) and
// guest agents never answer unless opts say otherwise.
func Start(tb testing.TB, opts ...Option) *Simulator {
	tb.Helper()
	o := proxmoxsim.Options{TaskDelay: 20 * time.Millisecond, StatusInterval: 50 * time.Millisecond, GuestAgentDelay: -1, UnauthorizedDelay: -1}
	for _, f := range opts {
		f(&o)
	}
	sim, err := proxmoxsim.Start(o)
	if err != nil {
		tb.Fatalf("failed to start the Proxmox VE simulator: %v", err)
	}
	tb.Cleanup(sim.Stop)
	return &Simulator{Simulator: sim}
}

// TokenCredentials is the data of a credentials Secret holding the API token.
func (s *Simulator) TokenCredentials() map[string][]byte {
	return map[string][]byte{"tokenID": []byte(s.TokenID), "tokenSecret": []byte(s.TokenSecret)}
}

// PasswordCredentials is the data of a credentials Secret holding a user and password.
func (s *Simulator) PasswordCredentials() map[string][]byte {
	return map[string][]byte{"username": []byte(s.Username), "password": []byte(s.Password)}
}

// TokenCredentialsSecret is a credentials Secret with the API token.
func (s *Simulator) TokenCredentialsSecret(namespace, name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: s.TokenCredentials()}
}

// PasswordCredentialsSecret is a credentials Secret with the user and password.
func (s *Simulator) PasswordCredentialsSecret(namespace, name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: s.PasswordCredentials()}
}

// Connection is a Provider connection to the simulator that verifies its certificate
// against the inline CA bundle and reads credentials from the Secret named secretName.
func (s *Simulator) Connection(secretName string) banlieuev1.Connection {
	return banlieuev1.Connection{
		Endpoint:       s.URL,
		CredentialsRef: banlieuev1.LocalObjectReference{Name: secretName},
		CABundle:       &banlieuev1.CABundle{Inline: string(s.CACert)},
	}
}

// WriteSnippet writes a snippet on a node's storage as an administrator's scp would,
// so the simulator serves as the Proxmox driver's snippet writer.
func (s *Simulator) WriteSnippet(_ context.Context, node, storage, name string, data []byte) error {
	return s.Simulator.WriteSnippet(node, storage, name, data)
}
