package faultproxy

import (
	"strings"
	"testing"
)

// TestLoopbackHost: a simulator never listens beyond loopback, whatever address it is given.
func TestLoopbackHost(t *testing.T) {
	tests := []struct {
		addr    string
		refused bool
	}{
		{addr: "0.0.0.0:0", refused: true},
		{addr: ":0", refused: true},
		{addr: "[::]:0", refused: true},
		{addr: "192.0.2.1:8006", refused: true},
		{addr: "example.com:8006", refused: true},
		{addr: "127.0.0.1:8006"},
		{addr: "127.10.0.1:0"},
		{addr: "[::1]:0"},
		{addr: "localhost:0"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			_, err := LoopbackHost(tt.addr)
			if tt.refused != (err != nil) {
				t.Fatalf("LoopbackHost(%q) = %v, refused want %v", tt.addr, err, tt.refused)
			}
			if tt.refused && !strings.Contains(err.Error(), "only on loopback") {
				t.Errorf("message %q does not say why", err)
			}
		})
	}
	if _, err := Start("0.0.0.0:0", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "only on loopback") {
		t.Errorf("Start on 0.0.0.0 = %v, want it refused before it listens", err)
	}
}
