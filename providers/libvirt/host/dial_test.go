package host

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		name    string
		uri     string
		want    endpoint
		wantErr bool
	}{
		{name: "the local system driver", uri: "qemu:///system",
			want: endpoint{transport: "unix", driverURI: "qemu:///system", socket: defaultSocket, safe: "qemu:///system"}},
		{name: "a private socket", uri: "qemu+unix:///system?socket=/tmp/s/libvirt-sock",
			want: endpoint{transport: "unix", driverURI: "qemu:///system", socket: "/tmp/s/libvirt-sock", safe: "qemu+unix:///system?socket=/tmp/s/libvirt-sock"}},
		{name: "the test driver", uri: "test:///default",
			want: endpoint{transport: "unix", driverURI: "test:///default", socket: defaultSocket, safe: "test:///default"}},
		{name: "SSH with a user and port", uri: "qemu+ssh://ops@kvm1.example.com:2222/system",
			want: endpoint{transport: "ssh", driverURI: "qemu:///system", host: "kvm1.example.com", addr: "kvm1.example.com:2222",
				user: "ops", socket: defaultSocket, safe: "qemu+ssh://kvm1.example.com:2222/system"}},
		{name: "SSH without a user logs in as root", uri: "qemu+ssh://kvm1/system",
			want: endpoint{transport: "ssh", driverURI: "qemu:///system", host: "kvm1", addr: "kvm1:22", user: "root", socket: defaultSocket, safe: "qemu+ssh://kvm1/system"}},
		{name: "TLS on the default port", uri: "qemu+tls://kvm1.example.com/system",
			want: endpoint{transport: "tls", driverURI: "qemu:///system", host: "kvm1.example.com", addr: "kvm1.example.com:16514", socket: defaultSocket, safe: "qemu+tls://kvm1.example.com/system"}},
		{name: "unencrypted TCP is refused", uri: "qemu+tcp://kvm1/system", wantErr: true},
		{name: "a host without a transport is refused", uri: "qemu://kvm1/system", wantErr: true},
		{name: "an empty endpoint is refused", uri: " ", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseEndpoint(tt.uri)
			if tt.wantErr {
				if !providersdk.IsPermanent(err) {
					t.Fatalf("err = %v, want a permanent error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, *got, cmp.AllowUnexported(endpoint{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// sshKey returns a PEM ed25519 private key and its public key.
func sshKey(t *testing.T) ([]byte, ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), sp
}

func TestNewDialer(t *testing.T) {
	key, hostKey := sshKey(t)
	knownHosts := []byte("kvm1.example.com " + string(ssh.MarshalAuthorizedKey(hostKey)))
	sshEP, _ := parseEndpoint("qemu+ssh://ops@kvm1.example.com/system")
	tlsEP, _ := parseEndpoint("qemu+tls://kvm1.example.com/system")
	tests := []struct {
		name    string
		ep      *endpoint
		creds   map[string][]byte
		wantErr string
	}{
		{name: "SSH with a key and known hosts", ep: sshEP, creds: map[string][]byte{SSHPrivateKeyKey: key, KnownHostsKey: knownHosts}},
		{name: "SSH without known hosts is refused: host keys are always checked", ep: sshEP,
			creds: map[string][]byte{SSHPrivateKeyKey: key}, wantErr: `credentials Secret infra/creds has no "known_hosts" key, which qemu+ssh needs`},
		{name: "SSH with a key that is not one", ep: sshEP, creds: map[string][]byte{SSHPrivateKeyKey: []byte("nope"), KnownHostsKey: knownHosts},
			wantErr: `credentials Secret infra/creds: "ssh-privatekey" is not an unencrypted PEM private key`},
		{name: "TLS without a client certificate", ep: tlsEP, creds: map[string][]byte{},
			wantErr: `credentials Secret infra/creds needs "tls.crt" and "tls.key" for qemu+tls`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newDialer(tt.ep, Config{Credentials: tt.creds, SecretRef: "infra/creds", DialTimeout: time.Second})
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.wantErr {
				t.Errorf("err = %q, want %q", got, tt.wantErr)
			}
		})
	}
}

func TestHostKeyCallback(t *testing.T) {
	_, known := sshKey(t)
	_, other := sshKey(t)
	cb, err := hostKeyCallback([]byte("# comment\n[kvm1.example.com]:2222 " + string(ssh.MarshalAuthorizedKey(known))))
	if err != nil {
		t.Fatal(err)
	}
	addr := &net.TCPAddr{IP: net.ParseIP("198.18.0.5"), Port: 2222}
	tests := []struct {
		name   string
		host   string
		key    ssh.PublicKey
		wantOK bool
	}{
		{name: "the known key of the known host", host: "kvm1.example.com:2222", key: known, wantOK: true},
		{name: "another key for the known host", host: "kvm1.example.com:2222", key: other},
		{name: "the known key on another port", host: "kvm1.example.com:22", key: known},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := cb(tt.host, addr, tt.key); (err == nil) != tt.wantOK {
				t.Errorf("err = %v, want ok %v", err, tt.wantOK)
			}
		})
	}
}
