package simcert

import (
	"crypto/x509"
	"testing"
)

func TestAServerCertificateVerifiesAgainstItsOwnAuthorityOnly(t *testing.T) {
	a, err := NewAuthority("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewAuthority("b")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		host   string
		roots  *x509.CertPool
		verify string // the name verified
		ok     bool
	}{
		{"loopback, against its authority", "127.0.0.1", a.Pool(), "127.0.0.1", true},
		{"localhost, against its authority", "", a.Pool(), "localhost", true},
		{"a named host it was issued for", "sim.example.test", a.Pool(), "sim.example.test", true},
		{"a name it was not issued for", "", a.Pool(), "other.example.test", false},
		{"against another simulator's authority", "127.0.0.1", b.Pool(), "127.0.0.1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert, err := a.ServerCertificate(tt.host)
			if err != nil {
				t.Fatal(err)
			}
			leaf, err := x509.ParseCertificate(cert.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			_, err = leaf.Verify(x509.VerifyOptions{Roots: tt.roots, DNSName: tt.verify})
			if (err == nil) != tt.ok {
				t.Errorf("verify %s: %v, want ok=%t", tt.verify, err, tt.ok)
			}
		})
	}
}
