package proxmox

import (
	"context"
	"time"
)

// vmidRefresh is how long the pool counts up from PVE's last answer while no VMID it
// handed out is in flight, before it asks again: VMIDs freed by deletions are then used
// again, as PVE itself would choose them.
const vmidRefresh = time.Minute

// vmidPool hands out the VMIDs new VMs take on one cluster, to every session of the
// driver. PVE reserves a VMID only when it answers the request that takes it, and
// hands the same free VMID (/cluster/nextid) to everyone who asks before then. Asking
// and then making the VM under one lock puts the cluster's VM creations in single
// file, each two round trips long; on a loaded cluster that was the provider's whole
// throughput, and the workers queued behind it starved every other step. So the pool
// asks PVE once, counts up from its answer, skipping the VMIDs it handed out that are
// still in flight, and asks again when one it handed out turned out taken (another
// client's). Workers wait on one another only while it asks.
type vmidPool struct {
	// lock, a channel of one slot so that a waiter gives up with its context, guards
	// the fields below.
	lock     chan struct{}
	next     int // 0: ask PVE
	askedAt  time.Time
	inFlight map[int]bool
}

func newVMIDPool() *vmidPool {
	return &vmidPool{lock: make(chan struct{}, 1), inFlight: map[int]bool{}}
}

// take hands out a VMID no other worker of the driver holds, asking PVE (ask) first
// when it has to.
func (p *vmidPool) take(ctx context.Context, now time.Time, ask func(context.Context) (int, error)) (int, error) {
	select {
	case p.lock <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-p.lock }()
	if p.next == 0 || (len(p.inFlight) == 0 && now.Sub(p.askedAt) >= vmidRefresh) {
		n, err := ask(ctx)
		if err != nil {
			return 0, err
		}
		p.next, p.askedAt = n, now
	}
	for p.inFlight[p.next] {
		p.next++
	}
	vmid := p.next
	p.next++
	p.inFlight[vmid] = true
	return vmid, nil
}

// done ends vmid's flight, once PVE answered the request that takes it; taken says PVE
// refused it as already taken, so the next VMID is asked of PVE again.
func (p *vmidPool) done(vmid int, taken bool) {
	p.lock <- struct{}{}
	defer func() { <-p.lock }()
	delete(p.inFlight, vmid)
	if taken {
		p.next = 0
	}
}
