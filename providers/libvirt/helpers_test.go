package libvirt

import (
	"context"
	"encoding/xml"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"libvirt.org/go/libvirtxml"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
	"github.com/banlieue/banlieue/sim/libvirtd"
)

// Objects of the shared daemon.
const (
	testPool    = "default"
	testImage   = "base.qcow2"
	testNetwork = "bnl-net"
	// testImageGiB is the virtual size of the test image, a blank qcow2: a domain with
	// no bootable OS still runs, which is all these tests need.
	testImageGiB = 1
)

var (
	sharedOnce   sync.Once
	sharedDaemon *libvirtd.Daemon
	sharedErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedDaemon != nil {
		sharedDaemon.Stop()
	}
	os.Exit(code)
}

// daemon returns the package's libvirtd, started on first use with a directory pool
// holding the test image and an isolated network on a random 198.18.0.0/15 subnet.
func daemon(t *testing.T) *libvirtd.Daemon {
	t.Helper()
	libvirtd.Require(t)
	sharedOnce.Do(func() {
		sharedDaemon, sharedErr = libvirtd.Start(libvirtd.Options{})
		if sharedErr != nil {
			return
		}
		sharedErr = prepare(sharedDaemon)
	})
	if sharedErr != nil {
		t.Fatalf("failed to start libvirtd: %v", sharedErr)
	}
	return sharedDaemon
}

// prepare makes the pool, image and network the tests use.
func prepare(d *libvirtd.Daemon) error {
	if _, err := d.DefineDirPool(testPool); err != nil {
		return err
	}
	// A bridge name of its own per run: a run killed before its cleanup leaves its
	// bridge behind, which must not stop the next run.
	if _, err := d.DefineTestNetwork(testNetwork, "bnl"); err != nil {
		return err
	}
	return d.CreateBlankImage(testPool, testImage, testImageGiB)
}

// provider returns a libvirt Provider for endpoint with parameters.
func provider(endpoint string, params map[string]string) *banlieuev1.Provider {
	return &banlieuev1.Provider{
		ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "kvm-1", Labels: map[string]string{"rack": "r1"}},
		Spec: banlieuev1.ProviderSpec{
			ProviderClassRef: banlieuev1.LocalObjectReference{Name: ProviderClass},
			Connection:       banlieuev1.Connection{Endpoint: endpoint},
			Parameters:       params,
			Capabilities: banlieuev1.Capabilities{
				StorageClasses: []banlieuev1.ClassMapping{
					{Name: "fast", Target: map[string]string{TargetPool: testPool}},
					{Name: "missing", Target: map[string]string{TargetPool: "nope"}},
				},
				NetworkClasses: []banlieuev1.ClassMapping{
					{Name: "lan", Target: map[string]string{TargetNetwork: testNetwork}},
					{Name: "gone", Target: map[string]string{TargetNetwork: "nope"}},
				},
				Features: []string{"gpu"},
			},
		},
	}
}

// connect opens a session to endpoint, closed when the test ends.
func connect(t *testing.T, endpoint string, params map[string]string, opts ...Option) *session {
	t.Helper()
	cl, err := NewDriver(opts...).Connect(t.Context(), providersdk.ProviderInfo{Provider: provider(endpoint, params)})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cl.Disconnect(context.Background()) })
	return cl.(*session)
}

// machine returns a machine with a fresh UID, 1 CPU, 256 MiB, a 2 GiB boot disk on
// the test image and one NIC, changed by muts.
func machine(name string, muts ...func(*providersdk.Machine)) *providersdk.Machine {
	m := &providersdk.Machine{
		UID: types.UID(uuid.NewString()), Namespace: "team-a", Name: name,
		Spec: infrav1.MachineSpec{
			Image:    infrav1.MachineImage{Name: "base", Kind: banlieuev1.ImageSourceBackingFile, Ref: testPool + "/" + testImage, ResolvedRef: testPool + "/" + testImage},
			Hardware: infrav1.MachineHardware{CPUs: 1, MemoryMiB: 256},
			Disks:    []infrav1.MachineDisk{{Name: "root", SizeGiB: 2, StorageClass: "fast", Target: map[string]string{TargetPool: testPool}}},
			Interfaces: []infrav1.MachineInterface{
				{Name: "eth0", NetworkClass: "lan", Target: map[string]string{TargetNetwork: testNetwork}},
			},
		},
	}
	for _, f := range muts {
		f(m)
	}
	return m
}

// eventually calls f until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// inspect runs f on a fresh qemu:///system connection of d, from outside the driver.
func inspect(t *testing.T, d *libvirtd.Daemon, f func(l *libvirt.Libvirt)) {
	t.Helper()
	l, err := d.Connect("qemu:///system")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Disconnect() }()
	f(l)
}

// machineVolumes lists the volumes of pool whose name starts with the machine's UID.
func machineVolumes(t *testing.T, l *libvirt.Libvirt, m *providersdk.Machine) []string {
	t.Helper()
	pool, err := l.StoragePoolLookupByName(testPool)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.StoragePoolRefresh(pool, 0); err != nil {
		t.Fatal(err)
	}
	vols, _, err := l.StoragePoolListAllVolumes(pool, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range vols {
		if strings.HasPrefix(v.Name, string(m.UID)) {
			out = append(out, v.Name)
		}
	}
	return out
}

// testVolume looks up the volume name of the test pool.
func testVolume(t *testing.T, l *libvirt.Libvirt, name string) libvirt.StorageVol {
	t.Helper()
	pool, err := l.StoragePoolLookupByName(testPool)
	if err != nil {
		t.Fatal(err)
	}
	vol, err := l.StorageVolLookupByName(pool, name)
	if err != nil {
		t.Fatal(err)
	}
	return vol
}

// volumeXML reads the volume name of the test pool.
func volumeXML(t *testing.T, l *libvirt.Libvirt, name string) *libvirtxml.StorageVolume {
	t.Helper()
	vol := testVolume(t, l, name)
	x, err := l.StorageVolGetXMLDesc(vol, 0)
	if err != nil {
		t.Fatal(err)
	}
	v := &libvirtxml.StorageVolume{}
	if err := v.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	return v
}

// domainsNamed counts the domains of l named name.
func domainsNamed(t *testing.T, l *libvirt.Libvirt, name string) int {
	t.Helper()
	doms, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range doms {
		if d.Name == name {
			n++
		}
	}
	return n
}

// mustObserve observes m and fails the test on error.
func mustObserve(t *testing.T, s *session, m *providersdk.Machine) providersdk.Observation {
	t.Helper()
	o, err := s.Observe(t.Context(), m)
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	return o
}

// The Reconciler calls Observe first and hands what it found to Create, Update or
// Delete; these helpers do the same, so that tests act on a machine as it would.

// createMachine observes m and creates its domain when Observe finds none.
func createMachine(ctx context.Context, s *session, m *providersdk.Machine) error {
	o, err := s.Observe(ctx, m)
	if err != nil || o.Exists {
		return err
	}
	_, err = s.Create(ctx, m, o)
	return err
}

// updateMachine observes m and updates its domain from what Observe found.
func updateMachine(ctx context.Context, s *session, m *providersdk.Machine) (providersdk.UpdateResult, error) {
	o, err := s.Observe(ctx, m)
	if err != nil {
		return providersdk.UpdateResult{}, err
	}
	return s.Update(ctx, m, o)
}

// deleteMachine observes m and deletes its domain from what Observe found. Unlike the
// Reconciler, it calls Delete when Observe finds no domain too, which then sweeps the
// machine's volumes.
func deleteMachine(ctx context.Context, s *session, m *providersdk.Machine) error {
	o, err := s.Observe(ctx, m)
	if err != nil {
		return err
	}
	_, err = s.Delete(ctx, m, o)
	return err
}

// domainXML reads the definition of l's domain named name.
func domainXML(t *testing.T, l *libvirt.Libvirt, name string) *libvirtxml.Domain {
	t.Helper()
	dom, err := l.DomainLookupByName(name)
	if err != nil {
		t.Fatal(err)
	}
	x, err := l.DomainGetXMLDesc(dom, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	return d
}

// metadataOf decodes banlieue's element in d's metadata; nil when it has none.
func metadataOf(t *testing.T, d *libvirtxml.Domain) *host.Metadata {
	t.Helper()
	if d.Metadata == nil {
		return nil
	}
	dec := xml.NewDecoder(strings.NewReader(d.Metadata.XML))
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Space == MetadataNamespace {
			m := &host.Metadata{}
			if err := dec.DecodeElement(m, &se); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
}
