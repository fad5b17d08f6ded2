package dtutils

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
	"github.com/seriema-go/seriema/alloc"
	"golang.org/x/sys/unix"
)

// SHMConfig configures the shm provider.
type SHMConfig struct {
	// Dir is the directory for the provider's unix socket. Default: a new
	// private directory (mode 0700) under os.TempDir(), removed on Close.
	Dir string
	// ConnectTimeout bounds reaching a peer's socket. Default 10 s.
	ConnectTimeout time.Duration
	// Logger receives peer-level events; default slog.Default().
	Logger *slog.Logger
	// MapResident is how many bytes of a peer's region, at most, are
	// mapped in here at once when this process first uses the region: the
	// pages already in memory (the owner populated or used them), so that
	// the first one-sided writes and reads into them take no page fault a
	// page (about 10 µs each on a VM: a shuffle endpoint's 2 MiB of
	// receive buffers cost its peer ~5 ms a query). Pages not in memory are
	// left alone; nothing is allocated. Default 64 MiB (DefaultMapResident);
	// negative: none, every page faults in on first touch.
	MapResident int64
}

// DefaultMapResident is SHMConfig.MapResident's default: 64 MiB, a
// millisecond or two of page-table work on first use of a region, bounded
// so that a peer's large mostly-resident region (a zone the writer may
// touch a corner of) does not stall the first Post for long.
const DefaultMapResident = 64 << 20

// DefaultSHMConfig returns the defaults (Dir empty: a private directory).
func DefaultSHMConfig() SHMConfig { return SHMConfig{}.withDefaults() }

func (c SHMConfig) withDefaults() SHMConfig {
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MapResident == 0 {
		c.MapResident = DefaultMapResident
	}
	return c
}

// VerifyConfig checks c (after defaults).
func (c SHMConfig) VerifyConfig() error {
	if c.withDefaults().ConnectTimeout < 0 {
		return fmt.Errorf("%w: ConnectTimeout %v", ErrBadConfig, c.ConnectTimeout)
	}
	return nil
}

// shm: peers on one machine. A one-sided operation is a memcpy (or an atomic
// instruction) by the poster into the peer's region, mapped from the memfd
// the peer hands over on first use (SCM_RIGHTS over the peer's unix socket,
// after checking the region's key); the peer's CPU does nothing. Send
// delivers into the peer's shared receive queue, which is itself shared
// memory. Each provider serves its regions on a unix socket in a private
// directory; a second "watch" connection per peer reports its death as EOF.
type shmProvider struct {
	proc   *Process
	cfg    SHMConfig
	log    *slog.Logger
	dir    string
	ownDir bool
	path   string
	ln     *net.UnixListener

	mu      sync.Mutex // guards peers and qps
	dialMu  sync.Mutex // serialises creating peers; never held by the server side
	peers   map[string]*shmPeer
	qps     []*shmQP
	byToken map[uint64]*shmQP
	connMu  sync.Mutex // guards conns (accepted connections)
	conns   []net.Conn
	closed  atomic.Bool

	probeOnce sync.Once // SHMProbe
	probe     []byte
	probeErr  error
}

// NewSHM returns an shm provider for proc.
func NewSHM(proc *Process, cfg SHMConfig) (Provider, error) {
	cfg = cfg.withDefaults()
	if err := cfg.VerifyConfig(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	p := &shmProvider{proc: proc, cfg: cfg, log: log.With("transport", "shm", "rank", proc.cfg.Rank), dir: cfg.Dir, peers: make(map[string]*shmPeer), byToken: make(map[uint64]*shmQP)}
	if p.dir == "" {
		d, err := os.MkdirTemp("", "seriema-shm-")
		if err != nil {
			return nil, fmt.Errorf("dtutils: shm socket directory: %w", err)
		}
		p.dir, p.ownDir = d, true
	}
	p.path = filepath.Join(p.dir, fmt.Sprintf("r%d-%x.sock", proc.cfg.Rank, randomToken()&0xffffff))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p.path, Net: "unix"})
	if err != nil {
		p.removeDir()
		return nil, fmt.Errorf("dtutils: shm listen on %s: %w", p.path, err)
	}
	os.Chmod(p.path, 0o600)
	p.ln = ln
	go p.serve()
	return p, nil
}

func (p *shmProvider) Transport() string { return "shm" }
func (p *shmProvider) Process() *Process { return p.proc }

func (p *shmProvider) removeDir() {
	if p.ownDir {
		os.RemoveAll(p.dir)
	}
}

// Control messages on the unix socket.
const (
	shmReqMap   = 1 // u8 kind, u32 region, u64 key → u8 status, u64 size, fd
	shmReqWatch = 2 // u8 kind, u64 queue-pair token → (nothing; EOF when that queue pair or its process closes)
	shmReqSize  = 13
	shmRespSize = 9
)

func (p *shmProvider) serve() {
	for {
		c, err := p.ln.AcceptUnix()
		if err != nil {
			return
		}
		p.connMu.Lock()
		p.conns = append(p.conns, c)
		p.connMu.Unlock()
		go p.serveConn(c)
	}
}

func (p *shmProvider) serveConn(c *net.UnixConn) {
	defer c.Close()
	var req [shmReqSize]byte
	for {
		if _, err := io.ReadFull(c, req[:1]); err != nil {
			return
		}
		switch req[0] {
		case shmReqWatch:
			var tok [8]byte
			if _, err := io.ReadFull(c, tok[:]); err != nil {
				return
			}
			p.mu.Lock()
			q := p.byToken[binary.LittleEndian.Uint64(tok[:])]
			if q != nil && !q.closed.Load() {
				q.watchers = append(q.watchers, c)
			}
			p.mu.Unlock()
			if q == nil {
				return
			}
			io.Copy(io.Discard, c) // until either side closes
			return
		case shmReqMap:
			if _, err := io.ReadFull(c, req[1:]); err != nil {
				return
			}
			id, key := binary.LittleEndian.Uint32(req[1:]), binary.LittleEndian.Uint64(req[5:])
			var resp [shmRespSize]byte
			r, ok := p.proc.reg.Lookup(id)
			if !ok || r.Key() != key {
				resp[0] = 1
				p.log.Warn("refused to share a region", "region", id, "known", ok)
				if _, err := c.Write(resp[:]); err != nil {
					return
				}
				continue
			}
			binary.LittleEndian.PutUint64(resp[1:], uint64(r.Size()))
			if _, _, err := c.WriteMsgUnix(resp[:], unix.UnixRights(r.FD()), nil); err != nil {
				return
			}
		default:
			p.log.Warn("unknown shm control request", "kind", req[0])
			return
		}
	}
}

func (p *shmProvider) NewQueuePair() (QueuePair, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	q := &shmQP{syncQP: newSyncQP(p.proc, transportSHM), p: p}
	q.ep.addr = p.path
	q.ep.srqRegion = p.proc.region.ID()
	q.ep.srqKey = p.proc.region.Key()
	p.mu.Lock()
	p.qps = append(p.qps, q)
	p.byToken[q.token] = q
	p.mu.Unlock()
	return q, nil
}

// Close closes every queue pair and connection and unmaps the peers'
// memory (once the process's holds are released, Process.Hold). No Post
// may run concurrently with Close.
func (p *shmProvider) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	qps := p.qps
	p.mu.Unlock()
	for _, q := range qps {
		q.Close()
	}
	p.mu.Lock()
	p.connMu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.connMu.Unlock()
	peers := make([]*shmPeer, 0, len(p.peers))
	for _, peer := range p.peers {
		peer.detach()
		peers = append(peers, peer)
	}
	// The peers' memory stays mapped while the process is held: endpoints
	// holding it (package shuffle's RD reads in place) may still read it.
	unmap := func() {
		for _, peer := range peers {
			peer.unmap()
		}
	}
	if !p.proc.deferWhileHeld(unmap) {
		unmap()
	}
	p.removeDir()
	return nil
}

type shmQP struct {
	*syncQP
	p        *shmProvider
	watchers []net.Conn // peers watching this queue pair; closed with it
	watching net.Conn   // our watch on the peer queue pair
}

func (q *shmQP) Connect(remote []byte) error {
	ep, err := parseEndpoint(remote, transportSHM)
	if err != nil {
		return err
	}
	peer, err := q.p.peer(ep)
	if err != nil {
		return err
	}
	// Watch the peer queue pair: EOF means it closed or its process died.
	c, err := net.DialTimeout("unix", ep.addr, q.p.cfg.ConnectTimeout)
	if err != nil {
		return fmt.Errorf("%w: watching rank %d: %v", ErrConnectionLost, ep.rank, err)
	}
	var req [9]byte
	req[0] = shmReqWatch
	binary.LittleEndian.PutUint64(req[1:], ep.token)
	if _, err := c.Write(req[:]); err != nil {
		c.Close()
		return fmt.Errorf("%w: watching rank %d: %v", ErrConnectionLost, ep.rank, err)
	}
	q.p.mu.Lock()
	q.watching = c
	q.p.mu.Unlock()
	go func() {
		var b [1]byte
		c.Read(b[:])
		q.peerGone.Store(true)
	}()
	q.setPeer(peer)
	return nil
}

func (q *shmQP) Close() error {
	q.syncQP.Close()
	q.p.mu.Lock()
	delete(q.p.byToken, q.token)
	w, watching := q.watchers, q.watching
	q.watchers, q.watching = nil, nil
	q.p.mu.Unlock()
	for _, c := range w {
		c.Close()
	}
	if watching != nil {
		watching.Close()
	}
	return nil
}

// peer returns the connection to the process serving ep.addr, creating it
// (and mapping its receive queues) on first use.
func (p *shmProvider) peer(ep endpoint) (*shmPeer, error) {
	// Two processes connecting to each other at once each wait on the
	// other's server, so no lock the server needs may be held here.
	p.dialMu.Lock()
	defer p.dialMu.Unlock()
	p.mu.Lock()
	peer, ok := p.peers[ep.addr]
	p.mu.Unlock()
	if ok {
		return peer, nil
	}
	c, err := net.DialTimeout("unix", ep.addr, p.cfg.ConnectTimeout)
	if err != nil {
		return nil, fmt.Errorf("%w: reaching rank %d at %s: %v", ErrConnectionLost, ep.rank, ep.addr, err)
	}
	ctl := c.(*net.UnixConn)
	peer = &shmPeer{r: ep.rank, ctl: ctl, regions: xsync.NewMapOf[uint32, *shmMapping](), mapResident: int(min(max(p.cfg.MapResident, 0), 1<<46))}
	m, err := peer.fetch(ep.srqRegion, ep.srqKey)
	if err != nil {
		peer.close()
		return nil, fmt.Errorf("mapping rank %d's receive queue: %w", ep.rank, err)
	}
	peer.rs, peer.calls, err = openQueues(m.mem, &peer.seen)
	if err != nil {
		peer.close()
		return nil, err
	}
	p.mu.Lock()
	p.peers[ep.addr] = peer
	p.mu.Unlock()
	return peer, nil
}

// openQueues attaches to a peer's receive-queue region (laid out by
// NewProcess: queueLayout), checking every part before use.
func openQueues(mem []byte, seen *atomic.Uint64) (receiveSide, *callArea, error) {
	rs := receiveSide{seen: seen}
	var err error
	if rs.srq, err = openRing(mem); err != nil {
		return rs, nil, err
	}
	l := queueLayout(int(rs.srq.capacity))
	if rs.srq.entry != recvDescSize || len(mem) < l.call {
		return rs, nil, fmt.Errorf("%w: receive queue of %d-byte entries in %d bytes", ErrBadEndpoint, rs.srq.entry, len(mem))
	}
	if rs.rcq, err = openRing(mem[l.rcq:l.cnt]); err != nil {
		return rs, nil, err
	}
	if rs.rcq.entry != recvComplSize || rs.rcq.capacity != rs.srq.capacity {
		return rs, nil, fmt.Errorf("%w: completion ring of %d %d-byte entries beside %d receive slots (a peer of another version?)", ErrBadEndpoint, rs.rcq.capacity, rs.rcq.entry, rs.srq.capacity)
	}
	rs.cnt = openCounters(mem[l.cnt:l.call])
	calls, err := openCallArea(mem[l.call:])
	return rs, calls, err
}

// shmPeer is another process on this machine: its receive queues and the
// regions of it mapped so far.
type shmPeer struct {
	r       uint32
	mu      sync.Mutex // serialises control requests
	ctl     *net.UnixConn
	regions *xsync.MapOf[uint32, *shmMapping]
	rs      receiveSide
	seen    atomic.Uint64 // the peer's ready count as last read (receiveSide.claim)
	calls   *callArea     // the peer's call area (OpCall)
	gone    atomic.Bool
	last    atomic.Pointer[shmMapping] // the region written last (syncQP.writeNow)
	// mapResident bounds what fetch maps in of a region's resident pages
	// (SHMConfig.MapResident; 0 for none).
	mapResident int
}

type shmMapping struct {
	mem []byte
	key uint64
	id  uint32
}

// lookup returns region's mapping, mapping it on first use, if key is
// its key, and caches it as the last one used; nil otherwise.
func (p *shmPeer) lookup(region uint32, key uint64) *shmMapping {
	m, ok := p.regions.Load(region)
	if !ok {
		var err error
		if m, err = p.fetch(region, key); err != nil {
			return nil
		}
	}
	if m.key != key {
		return nil
	}
	p.last.Store(m)
	return m
}

func (p *shmPeer) rank() uint32          { return p.r }
func (p *shmPeer) receiver() receiveSide { return p.rs }
func (p *shmPeer) lost() bool            { return p.gone.Load() }

func (p *shmPeer) call(src uint32, req, reply []byte, gone func() bool) (Status, int) {
	return shmCall(p.calls, src, req, reply, gone)
}

func (p *shmPeer) mem(region uint32, key, off, n uint64) ([]byte, bool) {
	m := p.last.Load()
	if m == nil || m.id != region || m.key != key {
		m = p.lookup(region, key)
	}
	if m == nil || off > uint64(len(m.mem)) || n > uint64(len(m.mem))-off {
		return nil, false
	}
	return m.mem[off : off+n : off+n], true
}

// fetch asks the peer for a region's memfd, proving the key, and maps it.
func (p *shmPeer) fetch(region uint32, key uint64) (*shmMapping, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.regions.Load(region); ok {
		return m, nil
	}
	var req [shmReqSize]byte
	req[0] = shmReqMap
	binary.LittleEndian.PutUint32(req[1:], region)
	binary.LittleEndian.PutUint64(req[5:], key)
	if _, err := p.ctl.Write(req[:]); err != nil {
		return nil, fmt.Errorf("%w: rank %d: %v", ErrConnectionLost, p.r, err)
	}
	var resp [shmRespSize]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := p.ctl.ReadMsgUnix(resp[:], oob)
	if err != nil || n != shmRespSize {
		return nil, fmt.Errorf("%w: rank %d: reading region reply: %v", ErrConnectionLost, p.r, err)
	}
	if resp[0] != 0 {
		return nil, fmt.Errorf("%w: rank %d refused region %d", ErrRemoteAccess, p.r, region)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("%w: rank %d sent no descriptor", ErrRemoteAccess, p.r)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("%w: rank %d sent no descriptor", ErrRemoteAccess, p.r)
	}
	defer unix.Close(fds[0])
	size := binary.LittleEndian.Uint64(resp[1:])
	if size == 0 || size > 1<<46 {
		return nil, fmt.Errorf("%w: rank %d reported a %d-byte region", ErrRemoteAccess, p.r, size)
	}
	mem, err := alloc.MapShared(fds[0], int(size))
	if err != nil {
		return nil, err
	}
	// Best effort: where it fails (a kernel before 5.14) the pages fault
	// in on first touch, as without it.
	_, _ = alloc.MapResident(mem, p.mapResident)
	m := &shmMapping{mem: mem, key: key, id: region}
	p.regions.Store(region, m)
	return m, nil
}

func (p *shmPeer) close() {
	p.detach()
	p.unmap()
}

// detach marks the peer gone and closes the connection to it.
func (p *shmPeer) detach() {
	p.gone.Store(true)
	p.last.Store(nil)
	p.ctl.Close()
}

// unmap unmaps the peer's memory mapped here.
func (p *shmPeer) unmap() {
	p.regions.Range(func(_ uint32, m *shmMapping) bool {
		alloc.Unmap(m.mem)
		return true
	})
	p.regions.Clear()
}

// SHMProbe returns what a peer passes to ProbeSHM to prove that it reaches
// this provider's shared memory: an shm endpoint (docs/wire.md) whose
// region is a small probe region of p's process holding token, a random
// nonce, in its first word. p must be an shm provider.
func SHMProbe(p Provider) ([]byte, error) {
	sp, ok := p.(*shmProvider)
	if !ok {
		return nil, fmt.Errorf("%w: %s provider has no shm probe", ErrBadRequest, p.Transport())
	}
	sp.probeOnce.Do(func() {
		r, err := sp.proc.reg.NewRegion(8, alloc.RegionConfig{Name: "shm-probe"})
		if err != nil {
			sp.probeErr = err
			return
		}
		nonce := randomToken()
		binary.LittleEndian.PutUint64(r.Bytes(), nonce)
		sp.probe = endpoint{transport: transportSHM, rank: sp.proc.cfg.Rank, token: nonce, srqRegion: r.ID(), srqKey: r.Key(), addr: sp.path}.marshal()
	})
	return sp.probe, sp.probeErr
}

// ProbeSHM reports whether the shm provider that made probe (SHMProbe) is
// reachable through shared memory from this process: its unix socket can
// be dialed, it hands over the probe region's memfd for the right key,
// and the mapping holds the nonce. Equal host names prove none of that
// (containers, network or mount namespaces); this does.
func ProbeSHM(probe []byte, timeout time.Duration) error {
	ep, err := parseEndpoint(probe, transportSHM)
	if err != nil {
		return err
	}
	c, err := net.DialTimeout("unix", ep.addr, timeout)
	if err != nil {
		return fmt.Errorf("%w: rank %d's shm socket %s: %v", ErrConnectionLost, ep.rank, ep.addr, err)
	}
	c.SetDeadline(time.Now().Add(timeout))
	peer := &shmPeer{r: ep.rank, ctl: c.(*net.UnixConn), regions: xsync.NewMapOf[uint32, *shmMapping]()}
	defer peer.close()
	m, err := peer.fetch(ep.srqRegion, ep.srqKey)
	if err != nil {
		return err
	}
	if len(m.mem) < 8 || binary.LittleEndian.Uint64(m.mem) != ep.token {
		return fmt.Errorf("%w: rank %d's probe region does not hold its nonce", ErrRemoteAccess, ep.rank)
	}
	return nil
}
