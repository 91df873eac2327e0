package libvirtd_test

import (
	"testing"

	"github.com/banlieue/banlieue/sim/libvirtd"
)

// TestDaemon starts a daemon, checks both drivers answer, restarts it and stops it.
func TestDaemon(t *testing.T) {
	d := libvirtd.StartT(t, libvirtd.Options{})
	for _, uri := range []string{"qemu:///system", "test:///default"} {
		l, err := d.Connect(uri)
		if err != nil {
			t.Fatalf("connect %s: %v", uri, err)
		}
		if _, err := l.ConnectGetHostname(); err != nil {
			t.Errorf("hostname via %s: %v", uri, err)
		}
		_ = l.Disconnect()
	}
	if _, err := d.DefineDirPool("images"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DefineTestNetwork("bnl-test", "bnlt"); err != nil {
		t.Fatal(err)
	}
	if err := d.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	l, err := d.Connect("qemu:///system")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Disconnect() }()
	if _, err := l.StoragePoolLookupByName("images"); err != nil {
		t.Errorf("pool after restart: %v", err)
	}
	n, err := l.NetworkLookupByName("bnl-test")
	if err != nil {
		t.Fatalf("network after restart: %v", err)
	}
	if active, err := l.NetworkIsActive(n); err != nil || active != 1 {
		t.Errorf("network active after restart = %d, %v", active, err)
	}
}
