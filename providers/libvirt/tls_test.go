package libvirt

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/sim/libvirtd"
)

// testCA is a CA that signs certificates for tests.
type testCA struct {
	cert *x509.Certificate
	key  *rsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "banlieue test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key for a server (on 127.0.0.1) or a client.
func (ca *testCA) issue(t *testing.T, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "client", Organization: []string{"banlieue"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		BasicConstraintsValid: true,
		// libvirt checks both bits on server and client certificates.
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.Subject.CommonName = "127.0.0.1"
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

func TestTLSConnection(t *testing.T) {
	libvirtd.Require(t)
	ca := newTestCA(t)
	serverCert, serverKey := ca.issue(t, true)
	d := libvirtd.StartT(t, libvirtd.Options{TLS: &libvirtd.TLS{CA: ca.pem, Cert: serverCert, Key: serverKey}})
	clientCert, clientKey := ca.issue(t, false)
	otherCA := newTestCA(t)
	strangerCert, strangerKey := otherCA.issue(t, false)
	endpoint := "qemu+tls://" + d.TLSAddr + "/system"
	tests := []struct {
		name     string
		creds    map[string][]byte
		caBundle []byte
		check    func(error) bool
	}{
		{name: "a client certificate of the daemon's CA, verified against the CA bundle",
			creds: map[string][]byte{TLSCertKey: clientCert, TLSKeyKey: clientKey}, caBundle: ca.pem,
			check: func(err error) bool { return err == nil }},
		{name: "the CA from the Secret when there is no CA bundle",
			creds: map[string][]byte{TLSCertKey: clientCert, TLSKeyKey: clientKey, CACertKey: ca.pem},
			check: func(err error) bool { return err == nil }},
		{name: "a server certificate of an unknown CA is unreachable",
			creds: map[string][]byte{TLSCertKey: clientCert, TLSKeyKey: clientKey}, caBundle: otherCA.pem,
			check: providersdk.IsUnreachable},
		{name: "a client certificate the daemon does not trust is unauthorized",
			creds: map[string][]byte{TLSCertKey: strangerCert, TLSKeyKey: strangerKey}, caBundle: ca.pem,
			check: providersdk.IsUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := providersdk.ProviderInfo{Provider: provider(endpoint, nil), Credentials: tt.creds, CABundle: tt.caBundle}
			cl, err := NewDriver(WithDialTimeout(5*time.Second)).Connect(t.Context(), info)
			if err == nil {
				defer func() { _ = cl.Disconnect(t.Context()) }()
				_, err = cl.(providersdk.InventoryReader).Inventory(t.Context())
			}
			if !tt.check(err) {
				t.Errorf("err = %v", err)
			}
		})
	}
}
