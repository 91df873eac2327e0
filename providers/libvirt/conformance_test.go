package libvirt

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/google/uuid"
	"golang.org/x/crypto/ssh"
	"libvirt.org/go/libvirtxml"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/pkg/providersdk/drivertest"
	"github.com/banlieue/banlieue/sim/libvirtd"
)

// TestConformance runs the SDK's conformance kit against a real libvirtd (QEMU under
// TCG), reading the daemon with go-libvirt on a connection of its own, not through
// the driver. Rejected credentials are an SSH key the host does not accept, through
// the SSH forwarder the SSH test uses.
func TestConformance(t *testing.T) {
	d := daemon(t)
	key, pub := sshKey(t)
	stranger, _ := sshKey(t)
	fw := startSSHForwarder(t, pub)
	sshHost, port, _ := net.SplitHostPort(fw.addr)
	knownHosts := []byte("[" + sshHost + "]:" + port + " " + string(ssh.MarshalAuthorizedKey(fw.hostKey)))
	rejected := providersdk.ProviderInfo{
		Provider:    provider("qemu+ssh://tester@"+fw.addr+"/system?socket="+d.SocketPath, nil),
		Credentials: map[string][]byte{SSHPrivateKeyKey: stranger, KnownHostsKey: knownHosts},
	}
	drivertest.Run(t, drivertest.Backend{
		Driver:   NewDriver(WithShutdownTimeout(2 * time.Second)), // the blank test guests ignore the power button
		Provider: providersdk.ProviderInfo{Provider: provider(d.QEMUURI(), nil)},
		Unreachable: providersdk.ProviderInfo{
			Provider:    provider("qemu+ssh://tester@127.0.0.1:1/system", nil), // a closed loopback port
			Credentials: map[string][]byte{SSHPrivateKeyKey: key, KnownHostsKey: knownHosts},
		},
		Unauthorized: &rejected,
		NewMachine:   func(*testing.T) *providersdk.Machine { return machine("conf-" + uuid.NewString()[:8]) },
		MissingImage: func(m *providersdk.Machine) {
			m.Spec.Image.Ref, m.Spec.Image.ResolvedRef = testPool+"/no-such.qcow2", testPool+"/no-such.qcow2"
		},
		Count: func(t *testing.T, m *providersdk.Machine) int {
			t.Helper()
			n := 0
			inspect(t, d, func(l *libvirt.Libvirt) {
				doms, _, err := l.ConnectListAllDomains(1, 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, dom := range doms {
					if uuid.UUID(dom.UUID).String() == string(m.UID) || dom.Name == domainName(m.Namespace, m.Name) {
						n++
					}
				}
			})
			return n
		},
		Disks: func(t *testing.T, m *providersdk.Machine) int {
			t.Helper()
			n := -1
			inspect(t, d, func(l *libvirt.Libvirt) {
				dom, err := l.DomainLookupByName(domainName(m.Namespace, m.Name))
				if err != nil {
					t.Fatal(err)
				}
				x, err := l.DomainGetXMLDesc(dom, libvirt.DomainXMLInactive)
				if err != nil {
					t.Fatal(err)
				}
				var def libvirtxml.Domain
				if err := def.Unmarshal(x); err != nil {
					t.Fatal(err)
				}
				n = 0
				for _, disk := range def.Devices.Disks {
					if disk.Device == "disk" {
						n++
					}
				}
			})
			return n
		},
		Snapshot: func(t *testing.T) string {
			t.Helper()
			var out []string
			inspect(t, d, func(l *libvirt.Libvirt) {
				doms, _, err := l.ConnectListAllDomains(1, 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, dom := range doms {
					x, err := l.DomainGetXMLDesc(dom, libvirt.DomainXMLInactive)
					if err != nil {
						t.Fatal(err)
					}
					state, _, err := l.DomainGetState(dom, 0)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, fmt.Sprintf("domain %s %d %s", dom.Name, state, x))
				}
				for _, v := range allVolumes(t, l) {
					out = append(out, "volume "+v)
				}
			})
			slices.Sort(out)
			return strings.Join(out, "\n")
		},
		Released: func(t *testing.T, m *providersdk.Machine, before providersdk.Observation) error {
			t.Helper()
			return releasedDomain(t, d, m, before)
		},
		// Someone else's domain with the machine's UUID, the key the driver finds domains
		// by, and no banlieue metadata.
		Impostor: func(t *testing.T, m *providersdk.Machine) func() bool {
			t.Helper()
			name := "impostor-" + string(m.UID)[:8]
			xml := fmt.Sprintf(`<domain type='qemu'><name>%s</name><uuid>%s</uuid><memory unit='MiB'>64</memory>`+
				`<os><type arch='x86_64'>hvm</type></os></domain>`, name, m.UID)
			var before string
			describe := func(l *libvirt.Libvirt) string {
				dom, err := l.DomainLookupByName(name)
				if err != nil {
					return ""
				}
				x, err := l.DomainGetXMLDesc(dom, libvirt.DomainXMLInactive)
				if err != nil {
					return ""
				}
				return x
			}
			inspect(t, d, func(l *libvirt.Libvirt) {
				if _, err := l.DomainDefineXMLFlags(xml, 0); err != nil {
					t.Fatal(err)
				}
				before = describe(l)
			})
			t.Cleanup(func() {
				inspect(t, d, func(l *libvirt.Libvirt) {
					if dom, err := l.DomainLookupByName(name); err == nil {
						_ = l.DomainUndefine(dom)
					}
				})
			})
			return func() bool {
				var now string
				inspect(t, d, func(l *libvirt.Libvirt) { now = describe(l) })
				return now != "" && now == before
			}
		},
	})
}

// allVolumes names every volume of every active pool, with its capacity.
func allVolumes(t *testing.T, l *libvirt.Libvirt) []string {
	t.Helper()
	pools, _, err := l.ConnectListAllStoragePools(1, libvirt.ConnectListStoragePoolsActive)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pools {
		vols, _, err := l.StoragePoolListAllVolumes(p, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vols {
			_, capacity, _, err := l.StorageVolGetInfo(v)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s/%s %d", p.Name, v.Name, capacity))
		}
	}
	return out
}

// releasedDomain checks, with go-libvirt, the domain a Release let go: still defined
// under the machine's UUID, in the power state Observe reported before, its volumes
// all there, and no banlieue metadata in its live XML nor in its definition. It
// removes the domain and the machine's volumes when the test ends.
func releasedDomain(t *testing.T, d *libvirtd.Daemon, m *providersdk.Machine, before providersdk.Observation) error {
	t.Helper()
	var errs []error
	inspect(t, d, func(l *libvirt.Libvirt) {
		dom, err := l.DomainLookupByUUID(libvirt.UUID(uuid.MustParse(string(m.UID))))
		if err != nil {
			errs = append(errs, fmt.Errorf("the domain is gone: %w", err))
			return
		}
		t.Cleanup(func() {
			inspect(t, d, func(l *libvirt.Libvirt) {
				_ = l.DomainDestroy(dom)
				_ = l.DomainUndefineFlags(dom, libvirt.DomainUndefineNvram|libvirt.DomainUndefineManagedSave)
				pool, err := l.StoragePoolLookupByName(testPool)
				if err != nil {
					return
				}
				for _, name := range machineVolumes(t, l, m) {
					if v, err := l.StorageVolLookupByName(pool, name); err == nil {
						_ = l.StorageVolDelete(v, 0)
					}
				}
			})
		})
		for _, flags := range []libvirt.DomainXMLFlags{0, libvirt.DomainXMLInactive} {
			x, err := l.DomainGetXMLDesc(dom, flags)
			if err != nil {
				errs = append(errs, err)
			} else if strings.Contains(x, MetadataNamespace) {
				errs = append(errs, fmt.Errorf("the domain's XML (flags %d) still has banlieue's metadata", flags))
			}
		}
		state, _, err := l.DomainGetState(dom, 0)
		if err != nil {
			errs = append(errs, err)
		} else if running := libvirt.DomainState(state) == libvirt.DomainRunning; running != (before.PowerState == banlieuev1.PowerStatePoweredOn) {
			errs = append(errs, fmt.Errorf("the domain's state is %d, it was %s", state, before.PowerState))
		}
		was, _ := before.Details.(*infrav1.LibvirtStatus)
		if was == nil || len(was.Volumes) == 0 {
			errs = append(errs, fmt.Errorf("the observation before the release lists no volumes: %+v", before.Details))
			return
		}
		have := strings.Join(allVolumes(t, l), "\n")
		for _, v := range was.Volumes {
			if !strings.Contains(have, v+" ") {
				errs = append(errs, fmt.Errorf("volume %s is gone", v))
			}
		}
	})
	return errors.Join(errs...)
}
