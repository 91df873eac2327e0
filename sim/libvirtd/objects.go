package libvirtd

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// DefineDirPool defines, builds and starts a directory storage pool named name on the
// QEMU driver, in a folder of the daemon's directory, and returns that folder.
func (d *Daemon) DefineDirPool(name string) (string, error) {
	dir := filepath.Join(d.Dir, "pools", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("failed to make pool folder: %w", err)
	}
	x, err := (&libvirtxml.StoragePool{Type: "dir", Name: name, Target: &libvirtxml.StoragePoolTarget{Path: dir}}).Marshal()
	if err != nil {
		return "", err
	}
	return dir, d.with(func(l *libvirt.Libvirt) error {
		p, err := l.StoragePoolDefineXML(x, 0)
		if err != nil {
			return fmt.Errorf("failed to define pool %s: %w", name, err)
		}
		if err := l.StoragePoolCreate(p, 0); err != nil {
			return fmt.Errorf("failed to start pool %s: %w", name, err)
		}
		return nil
	})
}

// DefineNetwork defines and starts an isolated libvirt network named name on the QEMU
// driver, on a new bridge; one that fails to start is undefined again. With cidr (e.g.
// "198.18.5.1/24", the host's address and prefix; keep to 198.18.0.0/15) the host gets
// that address and dnsmasq serves DHCP on the rest of the subnet; without, the network
// is a bare bridge.
func (d *Daemon) DefineNetwork(name, bridge, cidr string) error {
	n := &libvirtxml.Network{Name: name, Bridge: &libvirtxml.NetworkBridge{Name: bridge}}
	if cidr != "" {
		ip, err := networkIP(cidr)
		if err != nil {
			return err
		}
		n.IPs = []libvirtxml.NetworkIP{ip}
	}
	x, err := n.Marshal()
	if err != nil {
		return err
	}
	return d.with(func(l *libvirt.Libvirt) error {
		net, err := l.NetworkDefineXML(x)
		if err != nil {
			return fmt.Errorf("failed to define network %s: %w", name, err)
		}
		if err := l.NetworkCreate(net); err != nil {
			// A network that cannot start is not left defined: its name stays free.
			return errors.Join(fmt.Errorf("failed to start network %s: %w", name, err), l.NetworkUndefine(net))
		}
		return nil
	})
}

// DefineTestNetwork defines and starts an isolated network named name, with DHCP, on a
// bridge whose name starts with bridgePrefix and a random /24 of 198.18.0.0/15, and
// returns the host's address and prefix on it (the subnet's .1). Bridges and subnets
// are host-global: another run, or another test package running beside this one, may
// hold the ones drawn, and libvirt refuses to start a network on them ("already in
// use"). So a refused draw is drawn again, up to a few times.
func (d *Daemon) DefineTestNetwork(name, bridgePrefix string) (string, error) {
	var err error
	for range 8 {
		cidr := drawSubnet()
		err = d.DefineNetwork(name, randomBridge(bridgePrefix), cidr)
		switch {
		case err == nil:
			return cidr, nil
		case !strings.Contains(err.Error(), "already in use"):
			return "", err
		}
	}
	return "", err
}

// with runs f on a fresh qemu:///system connection.
func (d *Daemon) with(f func(*libvirt.Libvirt) error) error {
	l, err := d.Connect("qemu:///system")
	if err != nil {
		return fmt.Errorf("failed to connect to libvirtd: %w", err)
	}
	defer func() { _ = l.Disconnect() }()
	return f(l)
}

// networkIP is the host side of a network on cidr, with DHCP from the address after the
// host's to the last one before the broadcast address.
func networkIP(cidr string) (libvirtxml.NetworkIP, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() || p.Bits() > 29 {
		return libvirtxml.NetworkIP{}, fmt.Errorf("network address %q is not an IPv4 host address with a prefix of at most /29", cidr)
	}
	host := p.Addr()
	b := p.Masked().Addr().As4()
	n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	n |= 1<<(32-p.Bits()) - 1 // broadcast
	n--
	last := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	return libvirtxml.NetworkIP{
		Address: host.String(),
		Prefix:  uint(p.Bits()),
		DHCP:    &libvirtxml.NetworkDHCP{Ranges: []libvirtxml.NetworkDHCPRange{{Start: host.Next().String(), End: last.String()}}},
	}, nil
}

// writeTLS writes the TLS files, picks a free loopback port and returns the lines of
// libvirtd.conf that make the daemon listen there, verifying client certificates.
func (d *Daemon) writeTLS() (string, error) {
	files := map[string][]byte{"ca.pem": d.tls.CA, "server-cert.pem": d.tls.Cert, "server-key.pem": d.tls.Key}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(d.Dir, name), data, 0o600); err != nil {
			return "", fmt.Errorf("failed to write %s: %w", name, err)
		}
	}
	if d.TLSAddr == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("failed to find a free port: %w", err)
		}
		d.TLSAddr = ln.Addr().String()
		_ = ln.Close()
	}
	_, port, _ := net.SplitHostPort(d.TLSAddr)
	return fmt.Sprintf("listen_tls = 1\nlisten_tcp = 0\nlisten_addr = \"127.0.0.1\"\ntls_port = %q\nauth_tls = \"none\"\n"+
		"tls_no_verify_certificate = 0\nca_file = %q\ncert_file = %q\nkey_file = %q\n", port,
		filepath.Join(d.Dir, "ca.pem"), filepath.Join(d.Dir, "server-cert.pem"), filepath.Join(d.Dir, "server-key.pem")), nil
}

// drawSubnet is randomSubnet; a test of the redraw replaces it.
var drawSubnet = randomSubnet

// randomSubnet returns the host address and prefix of a random /24 in 198.18.0.0/15,
// the range reserved for benchmarks and routed nowhere, for a test network.
func randomSubnet() string {
	return fmt.Sprintf("198.%d.%d.1/24", 18+rand.IntN(2), rand.IntN(256)) //nolint:gosec // a test subnet, not a secret
}

// randomBridge is a bridge name that starts with prefix and is unlikely to be taken by
// another daemon or test on the host; Linux limits interface names to 15 bytes.
func randomBridge(prefix string) string {
	return fmt.Sprintf("%s%04x", prefix, rand.IntN(0x10000)) //nolint:gosec // a test bridge name, not a secret
}

// CreateBlankImage makes a blank qcow2 volume of sizeGiB in pool, through a fresh
// qemu:///system connection. See CreateBlankImageOn.
func (d *Daemon) CreateBlankImage(pool, name string, sizeGiB uint64) error {
	return d.with(func(l *libvirt.Libvirt) error { return CreateBlankImageOn(l, pool, name, sizeGiB) })
}

// CreateBlankImageOn makes a blank qcow2 volume of sizeGiB in pool through l: an image
// a domain runs from without an operating system, which is all tests and 'banlieue dev'
// need. test:///default keeps its state per connection, so its tests pass their own.
func CreateBlankImageOn(l *libvirt.Libvirt, pool, name string, sizeGiB uint64) error {
	p, err := l.StoragePoolLookupByName(pool)
	if err != nil {
		return fmt.Errorf("failed to find pool %s: %w", pool, err)
	}
	x, err := (&libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "GiB", Value: sizeGiB},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
	}).Marshal()
	if err != nil {
		return err
	}
	if _, err := l.StorageVolCreateXML(p, x, 0); err != nil {
		return fmt.Errorf("failed to create volume %s/%s: %w", pool, name, err)
	}
	return nil
}

// AddImage puts the file at path into the directory pool named pool (one DefineDirPool
// made) as the volume name: a hard link when the file is on the daemon's file system, so
// a cached image of hundreds of megabytes costs nothing, else a copy. Domains use it as
// a backing file only: it is never written.
func (d *Daemon) AddImage(pool, name, path string) error {
	dst := filepath.Join(d.Dir, "pools", pool, name)
	if err := os.Link(path, dst); err != nil {
		if err := copyFile(path, dst); err != nil {
			return fmt.Errorf("failed to put %s into pool %s: %w", path, pool, err)
		}
	}
	return d.with(func(l *libvirt.Libvirt) error {
		p, err := l.StoragePoolLookupByName(pool)
		if err != nil {
			return err
		}
		return l.StoragePoolRefresh(p, 0)
	})
}

// copyFile copies src to a new file dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src) //nolint:gosec // the test's own guest image, named by the caller
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) //nolint:gosec // a volume in the daemon's own pool folder
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
