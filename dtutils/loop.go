package dtutils

import (
	"fmt"
	"sync"
)

// LoopFabric connects loop providers inside one process (tests, and programs
// that want the API without a second process). One-sided operations are
// memcpy into the target process's registered memory, after the same key and
// bounds checks as the other transports.
type LoopFabric struct {
	mu  sync.Mutex
	qps map[uint64]*syncQP
}

// NewLoopFabric returns an empty fabric.
func NewLoopFabric() *LoopFabric { return &LoopFabric{qps: make(map[uint64]*syncQP)} }

// NewProvider returns a loop provider for proc on this fabric.
func (f *LoopFabric) NewProvider(proc *Process) Provider { return &loopProvider{f: f, proc: proc} }

type loopProvider struct {
	f    *LoopFabric
	proc *Process
	mu   sync.Mutex
	qps  []*syncQP
}

func (p *loopProvider) Transport() string { return "loop" }
func (p *loopProvider) Process() *Process { return p.proc }

func (p *loopProvider) NewQueuePair() (QueuePair, error) {
	q := newSyncQP(p.proc, transportLoop)
	p.f.mu.Lock()
	p.f.qps[q.token] = q
	p.f.mu.Unlock()
	p.mu.Lock()
	p.qps = append(p.qps, q)
	p.mu.Unlock()
	return &loopQP{q, p}, nil
}

func (p *loopProvider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	for _, q := range p.qps {
		q.Close()
		delete(p.f.qps, q.token)
	}
	return nil
}

type loopQP struct {
	*syncQP
	p *loopProvider
}

func (q *loopQP) Connect(remote []byte) error {
	ep, err := parseEndpoint(remote, transportLoop)
	if err != nil {
		return err
	}
	q.p.f.mu.Lock()
	peer, ok := q.p.f.qps[ep.token]
	q.p.f.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: no loop queue pair with that endpoint", ErrBadEndpoint)
	}
	q.setPeer(loopPeer{localTarget{peer.proc}, peer})
	return nil
}

// loopPeer is the peer process's own state; it is lost when its queue pair closes.
type loopPeer struct {
	localTarget
	qp *syncQP
}

func (p loopPeer) lost() bool { return p.qp.closed.Load() }
