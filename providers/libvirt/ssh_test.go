package libvirt

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// sshForwarder is an SSH server on loopback that accepts one client key and forwards
// "direct-streamlocal" channels (what the driver opens to libvirtd's socket) to unix
// sockets, as OpenSSH's sshd does.
type sshForwarder struct {
	addr    string
	hostKey ssh.PublicKey
	wg      sync.WaitGroup
	// conns counts the SSH connections accepted.
	conns atomic.Int64
}

func startSSHForwarder(t *testing.T, clientKey ssh.PublicKey) *sshForwarder {
	t.Helper()
	_, hostPriv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if string(k.Marshal()) == string(clientKey.Marshal()) {
			return &ssh.Permissions{}, nil
		}
		return nil, errors.New("unknown key")
	}}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &sshForwarder{addr: ln.Addr().String(), hostKey: signer.PublicKey()}
	t.Cleanup(func() { _ = ln.Close(); f.wg.Wait() })
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() { defer f.wg.Done(); f.serve(c, cfg) }()
		}
	}()
	return f
}

func (f *sshForwarder) serve(c net.Conn, cfg *ssh.ServerConfig) {
	defer func() { _ = c.Close() }()
	conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	f.conns.Add(1)
	defer func() { _ = conn.Close() }()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "direct-streamlocal@openssh.com" {
			_ = nc.Reject(ssh.UnknownChannelType, "only streamlocal forwarding")
			continue
		}
		var req struct {
			Path      string
			Reserved1 string
			Reserved2 uint32
		}
		if err := ssh.Unmarshal(nc.ExtraData(), &req); err != nil {
			_ = nc.Reject(ssh.ConnectionFailed, "bad request")
			continue
		}
		sock, err := net.Dial("unix", req.Path)
		if err != nil {
			_ = nc.Reject(ssh.ConnectionFailed, err.Error())
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			_ = sock.Close()
			continue
		}
		go ssh.DiscardRequests(creqs)
		go func() { _, _ = io.Copy(ch, sock); _ = ch.CloseWrite() }()
		go func() { _, _ = io.Copy(sock, ch); _ = sock.Close() }()
	}
}

func TestSSHConnection(t *testing.T) {
	d := daemon(t)
	key, pub := sshKey(t)
	_, otherPub := sshKey(t)
	otherKey, _ := sshKey(t)
	fw := startSSHForwarder(t, pub)
	host, port, _ := net.SplitHostPort(fw.addr)
	endpoint := "qemu+ssh://tester@" + fw.addr + "/system?socket=" + d.SocketPath
	knownHosts := func(k ssh.PublicKey) []byte {
		return []byte("[" + host + "]:" + port + " " + string(ssh.MarshalAuthorizedKey(k)))
	}
	tests := []struct {
		name  string
		creds map[string][]byte
		check func(error) bool
	}{
		{name: "the right key and a known host key connect", creds: map[string][]byte{SSHPrivateKeyKey: key, KnownHostsKey: knownHosts(fw.hostKey)},
			check: func(err error) bool { return err == nil }},
		{name: "a host key other than the known one is unreachable", creds: map[string][]byte{SSHPrivateKeyKey: key, KnownHostsKey: knownHosts(otherPub)},
			check: providersdk.IsUnreachable},
		{name: "a key the server does not accept is unauthorized", creds: map[string][]byte{SSHPrivateKeyKey: otherKey, KnownHostsKey: knownHosts(fw.hostKey)},
			check: providersdk.IsUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := provider(endpoint, nil)
			before := fw.conns.Load()
			cl, err := NewDriver().Connect(t.Context(), providersdk.ProviderInfo{Provider: p, Credentials: tt.creds})
			if err == nil {
				defer func() {
					if err := cl.Disconnect(t.Context()); err != nil {
						t.Errorf("disconnect: %v", err)
					}
				}()
				s := cl.(*session)
				_, err = s.Inventory(t.Context())
				if err == nil {
					// The session keeps its connection across calls.
					if _, err = s.Inventory(t.Context()); err == nil && fw.conns.Load()-before != 1 {
						t.Errorf("the session made %d SSH connections for two calls, want 1", fw.conns.Load()-before)
					}
				}
			}
			if !tt.check(err) {
				t.Errorf("err = %v", err)
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
