// Package faultproxy is a TCP proxy on loopback that a test or 'banlieue dev' puts in
// front of a backend simulator to take it off the network and bring it back on the same
// address, as a network outage or a restart of a real backend does, without touching
// the simulator's state.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Proxy forwards every connection on its address to a target address.
type Proxy struct {
	target string

	mu       sync.Mutex
	addr     string
	listener net.Listener
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// Start listens on addr (host:port on loopback; port 0 picks one) and forwards to target.
func Start(addr, target string) (*Proxy, error) {
	if _, err := LoopbackHost(addr); err != nil {
		return nil, err
	}
	p := &Proxy{target: target, conns: map[net.Conn]struct{}{}}
	if err := p.listen(addr); err != nil {
		return nil, err
	}
	return p, nil
}

// Addr is the proxy's address, host:port. It stays the same across Down and Up.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

func (p *Proxy) listen(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", addr, err)
	}
	p.mu.Lock()
	p.listener, p.addr = l, l.Addr().String()
	p.mu.Unlock()
	p.wg.Add(1)
	go p.accept(l)
	return nil
}

// Down closes the listener and cuts every open connection: clients see connection
// refused until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	l := p.listener
	p.listener = nil
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	if l != nil {
		_ = l.Close()
	}
	p.wg.Wait()
}

// Up listens again on the same address.
func (p *Proxy) Up() error {
	p.mu.Lock()
	up := p.listener != nil
	p.mu.Unlock()
	if up {
		return nil
	}
	return p.listen(p.Addr())
}

// Close takes the proxy down for good.
func (p *Proxy) Close() { p.Down() }

func (p *Proxy) accept(l net.Listener) {
	defer p.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track records c as open, unless the proxy went down meanwhile.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listener == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		_ = c.Close()
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	backend, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client) || !p.track(backend) {
		p.untrack(client, backend)
		return
	}
	var once sync.WaitGroup
	once.Add(2)
	pipe := func(dst, src net.Conn) {
		defer once.Done()
		if _, err := io.Copy(dst, src); err != nil && !errors.Is(err, net.ErrClosed) {
			_ = dst.Close()
		}
		// Half-close so the other direction finishes its copy.
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	go pipe(backend, client)
	go pipe(client, backend)
	once.Wait()
	p.untrack(client, backend)
}
