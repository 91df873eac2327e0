package vspheresim

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

// certValidity is how long the simulator's certificates are valid: longer than any
// 'banlieue dev' session, as nothing renews them.
const certValidity = 365 * 24 * time.Hour

// authority is a CA of one simulator's own, so that a client that trusts one simulator
// does not trust another, as with two real vCenters.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// pem is cert in PEM, the CA bundle a client verifies the simulator against.
	pem []byte
}

// newAuthority makes a fresh CA.
func newAuthority() (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("failed to make a CA key: %w", err)
	}
	tmpl := certTemplate(1, "vspheresim CA")
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
	return &authority{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// serverCertificate signs a server certificate for loopback (127.0.0.1, ::1, localhost)
// and for host, when it names one address rather than every interface.
func (a *authority) serverCertificate(host string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("failed to make a server key: %w", err)
	}
	leaf := certTemplate(2, "vcsim")
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

// certTemplate is a certificate valid from an hour ago, for clocks a little behind,
// for certValidity.
func certTemplate(serial int64, commonName string) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
	}
}

// pool is a pool holding only the CA, so that a client trusts this simulator and
// nothing else.
func (a *authority) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.cert)
	return p
}

// NewCA returns the PEM certificate of a fresh CA that signed nothing: a CA bundle that
// no simulator's certificate verifies against, for testing that a client refuses it.
func NewCA() ([]byte, error) {
	a, err := newAuthority()
	if err != nil {
		return nil, err
	}
	return a.pem, nil
}
