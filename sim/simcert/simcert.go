// Package simcert issues the TLS certificates of banlieue's backend simulators: each
// simulator gets a CA of its own, so that a client that trusts one simulator does not
// trust another, as with two real vCenters or two Proxmox VE clusters.
package simcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// validity is how long the certificates are valid: longer than any test or
// 'banlieue dev' session, as nothing renews them.
const validity = 365 * 24 * time.Hour

// Authority is a simulator's own CA.
type Authority struct {
	// PEM is the CA certificate in PEM: the CA bundle a client verifies the simulator with.
	PEM []byte

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewAuthority makes a fresh CA called name.
func NewAuthority(name string) (*Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("failed to make a CA key: %w", err)
	}
	tmpl := template(1, name)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("failed to make a CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("failed to read the CA certificate: %w", err)
	}
	return &Authority{PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}, nil
}

// ServerCertificate signs a server certificate for loopback (127.0.0.1, ::1, localhost)
// and for host, when it names one address or name rather than every interface.
func (a *Authority) ServerCertificate(host string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("failed to make a server key: %w", err)
	}
	leaf := template(2, "localhost")
	leaf.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	leaf.DNSNames = []string{"localhost"}
	leaf.KeyUsage = x509.KeyUsageDigitalSignature
	leaf.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() && !ip.IsLoopback() {
		leaf.IPAddresses = append(leaf.IPAddresses, ip)
	} else if ip == nil && host != "" && host != "localhost" {
		leaf.DNSNames = append(leaf.DNSNames, host)
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("failed to make a server certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// Pool is a pool holding only the CA, so that a client trusts this simulator and
// nothing else.
func (a *Authority) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.cert)
	return p
}

// template is a certificate valid from an hour ago, for clocks a little behind.
func template(serial int64, commonName string) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
	}
}
