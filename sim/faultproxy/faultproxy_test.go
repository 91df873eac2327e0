package faultproxy

import (
	"bufio"
	"net"
	"testing"
)

// echo serves one line back on every connection.
func echo(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte(line))
			}()
		}
	}()
	return l.Addr().String()
}

func roundTrip(addr string) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestTheProxyGoesDownAndComesBackOnTheSameAddress(t *testing.T) {
	p, err := Start("127.0.0.1:0", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	addr := p.Addr()
	if got, err := roundTrip(addr); err != nil || got != "ping\n" {
		t.Fatalf("through the proxy: %q, %v; want the echo", got, err)
	}
	p.Down()
	if _, err := roundTrip(addr); err == nil {
		t.Fatal("a connection went through a proxy that is down")
	}
	if err := p.Up(); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr {
		t.Errorf("address after Up = %s, want %s", p.Addr(), addr)
	}
	if got, err := roundTrip(addr); err != nil || got != "ping\n" {
		t.Fatalf("after Up: %q, %v; want the echo", got, err)
	}
}
