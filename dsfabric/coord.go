package dsfabric

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// Frames on the coordinator connection: u32 length, then the message.
func writeFrame(c net.Conn, msg []byte) error {
	b := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(msg)), uint32(len(msg)))
	_, err := c.Write(append(b, msg...))
	return err
}

func readFrame(c net.Conn) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(h[:])
	if n == 0 || n > maxCoordFrame {
		return nil, fmt.Errorf("%w: coordinator frame of %d bytes", ErrBadMessage, n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	return b, err
}

func splitCoord(addr string) (network, address string) {
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		return "unix", p
	}
	return "tcp", addr
}

// coordinator is rank 0's side: one connection per other rank.
type coordinator struct {
	f     *Fabric
	ln    net.Listener
	conns []net.Conn
	wmu   []sync.Mutex // serialises writes per connection
	mu    sync.Mutex
	bar   map[uint32]map[int]bool // barrier seq → arrived ranks
	byes  map[int]bool
	left  chan int // a rank said bye or died
}

// listen opens rank 0's coordinator endpoint.
func listenCoord(addr string) (net.Listener, error) {
	network, a := splitCoord(addr)
	if network == "unix" {
		os.Remove(a) // a stale socket of an earlier job with the same ID
	}
	ln, err := net.Listen(network, a)
	if err != nil {
		return nil, fmt.Errorf("%w: coordinator listen on %s: %v", ErrBootstrap, addr, err)
	}
	if network == "unix" {
		os.Chmod(a, 0o600)
	}
	return ln, nil
}

// gather accepts hellos until every rank arrived or the deadline passed.
// Hellos with a wrong token, rank or size are refused and logged; the job
// still forms with the right ones.
func (c *coordinator) gather(ctx context.Context, l launch, deadline time.Time) ([]member, error) {
	size := l.size
	machines := make([]member, size)
	machines[0] = member{machine: machineID(), probe: c.f.probe}
	type arrival struct {
		c net.Conn
		h hello
	}
	arrivals := make(chan arrival)
	go func() {
		for {
			conn, err := c.ln.Accept()
			if err != nil {
				return
			}
			go func() {
				conn.SetReadDeadline(deadline)
				b, err := readFrame(conn)
				conn.SetReadDeadline(time.Time{})
				var h hello
				if err == nil {
					h, err = decodeHello(b)
				}
				reason := ""
				switch {
				case err != nil:
					reason = err.Error()
				case subtle.ConstantTimeCompare(h.token, []byte(l.token)) != 1:
					reason = "bad job token"
				case int(h.size) != size:
					reason = fmt.Sprintf("job size %d, want %d", h.size, size)
				case h.rank == 0 || int(h.rank) >= size:
					reason = fmt.Sprintf("rank %d out of range", h.rank)
				}
				if reason != "" {
					c.f.log.Warn("dsfabric: rejected hello", "from", conn.RemoteAddr().String(), "reason", reason)
					writeFrame(conn, wbuf{msgRefused}.str([]byte(reason)))
					conn.Close()
					return
				}
				select {
				case arrivals <- arrival{conn, h}:
				case <-ctx.Done():
					conn.Close()
				}
			}()
		}
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for got := 1; got < size; {
		select {
		case a := <-arrivals:
			if c.conn(int(a.h.rank)) != nil {
				c.f.log.Warn("dsfabric: rejected a second hello for a rank", "rank", a.h.rank)
				writeFrame(a.c, wbuf{msgRefused}.str([]byte("rank already joined")))
				a.c.Close()
				continue
			}
			c.mu.Lock()
			c.conns[a.h.rank] = a.c
			c.mu.Unlock()
			machines[a.h.rank] = member{machine: a.h.machine, probe: a.h.probe}
			got++
		case <-timer.C:
			var missing []string
			for r := 1; r < size; r++ {
				if c.conn(r) == nil {
					missing = append(missing, fmt.Sprint(r))
				}
			}
			return nil, fmt.Errorf("%w: rank %s never arrived within %v", ErrBootstrap, strings.Join(missing, ", "), time.Until(deadline)+c.f.cfg.BootstrapTimeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for r := 1; r < size; r++ {
		if err := c.send(r, encodeTable(machines)); err != nil {
			return nil, fmt.Errorf("%w: sending the table to rank %d: %v", ErrBootstrap, r, err)
		}
	}
	return machines, nil
}

// newCoordinator prepares rank 0's side for a job of size ranks.
func newCoordinator(f *Fabric, ln net.Listener, size int) *coordinator {
	return &coordinator{f: f, ln: ln, conns: make([]net.Conn, size), wmu: make([]sync.Mutex, size)}
}

// conn returns rank r's connection, nil before its hello.
func (c *coordinator) conn(r int) net.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conns[r]
}

func (c *coordinator) send(r int, msg []byte) error {
	conn := c.conn(r)
	if conn == nil {
		return fmt.Errorf("%w: rank %d has not joined", ErrBootstrap, r)
	}
	c.wmu[r].Lock()
	defer c.wmu[r].Unlock()
	return writeFrame(conn, msg)
}

// plan collects the ranks whose shm probe each rank passed (own for rank
// 0) and gives every rank the peers it shares memory with: a pair uses shm
// only when both of its probes passed, so both sides always agree.
func (c *coordinator) plan(own []int, deadline time.Time) ([]int, error) {
	size := len(c.conns)
	reach := make([][]bool, size)
	mark := func(r int, ranks []int) {
		reach[r] = make([]bool, size)
		for _, p := range ranks {
			reach[r][p] = true
		}
	}
	mark(0, own)
	for r := 1; r < size; r++ {
		c.conns[r].SetReadDeadline(deadline)
		b, err := readFrame(c.conns[r])
		c.conns[r].SetReadDeadline(time.Time{})
		var ranks []int
		if err == nil {
			ranks, err = decodeRanks(b, msgReach, size)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: shm probes of rank %d: %v", ErrBootstrap, r, err)
		}
		mark(r, ranks)
	}
	with := func(r int) []int {
		var out []int
		for p := 0; p < size; p++ {
			if p != r && reach[r][p] && reach[p][r] {
				out = append(out, p)
			}
		}
		return out
	}
	for r := 1; r < size; r++ {
		if err := c.send(r, encodeRanks(msgPlan, with(r))); err != nil {
			return nil, fmt.Errorf("%w: transport plan for rank %d: %v", ErrBootstrap, r, err)
		}
	}
	return with(0), nil
}

// exchange collects every rank's endpoints and gives each rank the ones
// made for it.
func (c *coordinator) exchange(own []epEntry, deadline time.Time) ([]epEntry, error) {
	size := len(c.conns)
	all := make([][]epEntry, size)
	all[0] = own
	for r := 1; r < size; r++ {
		c.conns[r].SetReadDeadline(deadline)
		b, err := readFrame(c.conns[r])
		c.conns[r].SetReadDeadline(time.Time{})
		if err != nil {
			return nil, fmt.Errorf("%w: endpoints of rank %d: %v", ErrBootstrap, r, err)
		}
		if all[r], err = decodeEndpoints(b, msgEndpoints, size); err != nil {
			return nil, fmt.Errorf("%w: endpoints of rank %d: %v", ErrBootstrap, r, err)
		}
	}
	route := func(to int) []epEntry {
		var es []epEntry
		for from := 0; from < size; from++ {
			for _, e := range all[from] {
				if int(e.peer) == to {
					es = append(es, epEntry{peer: uint32(from), ep: e.ep})
				}
			}
		}
		return es
	}
	for r := 1; r < size; r++ {
		if err := c.send(r, encodeEndpoints(msgPeers, route(r))); err != nil {
			return nil, fmt.Errorf("%w: endpoints for rank %d: %v", ErrBootstrap, r, err)
		}
	}
	return route(0), nil
}

// serve reads each rank's connection after bootstrap: barrier arrivals,
// byes, and EOF as death.
func (c *coordinator) serve() {
	c.bar = map[uint32]map[int]bool{}
	c.byes = map[int]bool{}
	c.left = make(chan int, len(c.conns))
	for r := 1; r < len(c.conns); r++ {
		go func(r int) {
			for {
				b, err := readFrame(c.conns[r])
				if err != nil {
					c.mu.Lock()
					bye := c.byes[r]
					c.mu.Unlock()
					if !bye {
						c.f.markDead(r, fmt.Sprintf("lost its coordinator connection: %v", err))
					}
					c.left <- r
					return
				}
				m, err := decodeControl(b, len(c.conns), msgBarrier, msgBye)
				if err != nil {
					// A barrier read wrong would release the wrong one, or
					// none: the rank is cut off, with the reason.
					c.f.log.Error("dsfabric: malformed coordinator message; cutting the rank off", "rank", r, "err", err)
					c.f.markDead(r, fmt.Sprintf("sent a malformed coordinator message: %v", err))
					c.conns[r].Close() // the next read fails: the loop ends as for a death
					continue
				}
				switch m.typ {
				case msgBarrier:
					c.arrive(r, m.seq)
				case msgBye:
					c.mu.Lock()
					c.byes[r] = true
					c.mu.Unlock()
				}
			}
		}(r)
	}
}

// arrive records rank r at barrier seq and releases it when every live rank
// is there.
func (c *coordinator) arrive(r int, seq uint32) {
	c.mu.Lock()
	if c.bar[seq] == nil {
		c.bar[seq] = map[int]bool{}
	}
	c.bar[seq][r] = true
	c.mu.Unlock()
	c.check()
}

// check releases every barrier that all live ranks reached.
func (c *coordinator) check() {
	c.mu.Lock()
	var done []uint32
	for seq, arrived := range c.bar {
		all := true
		for r := range c.conns {
			if !arrived[r] && !c.f.isDead(r) {
				all = false
				break
			}
		}
		if all {
			done = append(done, seq)
			delete(c.bar, seq)
		}
	}
	c.mu.Unlock()
	for _, seq := range done {
		for r := 1; r < len(c.conns); r++ {
			if !c.f.isDead(r) {
				c.send(r, control{typ: msgRelease, seq: seq}.encode())
			}
		}
		c.f.released(seq)
	}
}

// announce tells every live rank that rank died.
func (c *coordinator) announce(rank int, reason string) {
	for r := 1; r < len(c.conns); r++ {
		if r != rank && !c.f.isDead(r) {
			c.send(r, control{typ: msgDead, rank: uint32(rank), reason: []byte(reason)}.encode())
		}
	}
	c.check()
}

// client is the side of ranks other than 0.
type client struct {
	f    *Fabric
	conn net.Conn
	wmu  sync.Mutex
}

func dialCoord(ctx context.Context, l launch, deadline time.Time) (net.Conn, error) {
	network, a := splitCoord(l.coord)
	var last error
	for time.Now().Before(deadline) {
		d := net.Dialer{Deadline: deadline}
		c, err := d.DialContext(ctx, network, a)
		if err == nil {
			return c, nil
		}
		last = err
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("%w: rank 0 (coordinator %s) not reachable: %v", ErrBootstrap, l.coord, last)
}

// join says hello and returns the machine table.
func (c *client) join(l launch, deadline time.Time) ([]member, error) {
	h := hello{rank: uint32(l.rank), size: uint32(l.size), token: []byte(l.token), machine: machineID(), probe: c.f.probe}
	b, err := c.ask(h.encode(), "hello", "the table from rank 0", deadline)
	if err != nil {
		return nil, err
	}
	if b[0] == msgRefused {
		r := rbuf{b: b[1:]}
		return nil, fmt.Errorf("%w: rank 0 refused rank %d: %s", ErrBootstrap, l.rank, r.str())
	}
	return decodeTable(b, l.size)
}

// plan sends the ranks whose shm probe passed and returns the peers to
// use shm with (see coordinator.plan).
func (c *client) plan(reach []int, size int, deadline time.Time) ([]int, error) {
	b, err := c.ask(encodeRanks(msgReach, reach), "sending shm probes", "the transport plan", deadline)
	if err != nil {
		return nil, err
	}
	return decodeRanks(b, msgPlan, size)
}

func (c *client) exchange(own []epEntry, size int, deadline time.Time) ([]epEntry, error) {
	b, err := c.ask(encodeEndpoints(msgEndpoints, own), "sending endpoints", "peers' endpoints", deadline)
	if err != nil {
		return nil, err
	}
	return decodeEndpoints(b, msgPeers, size)
}

// ask is one bootstrap step: send msg to rank 0, then read its answer by
// deadline. sending and awaited name the two halves in errors.
func (c *client) ask(msg []byte, sending, awaited string, deadline time.Time) ([]byte, error) {
	if err := c.send(msg); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBootstrap, sending, err)
	}
	c.conn.SetReadDeadline(deadline)
	defer c.conn.SetReadDeadline(time.Time{})
	b, err := readFrame(c.conn)
	if err != nil {
		return nil, fmt.Errorf("%w: waiting for %s: %v", ErrBootstrap, awaited, err)
	}
	return b, nil
}

func (c *client) send(msg []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return writeFrame(c.conn, msg)
}

// serve reads releases and deaths; EOF from rank 0 means rank 0 died.
func (c *client) serve() {
	for {
		b, err := readFrame(c.conn)
		if err != nil {
			if !c.f.closing.Load() {
				c.f.markDead(0, fmt.Sprintf("lost the coordinator connection: %v", err))
			}
			return
		}
		m, err := decodeControl(b, c.f.names.Size, msgRelease, msgDead)
		if err != nil {
			c.f.log.Error("dsfabric: malformed message from rank 0; leaving the job", "err", err)
			c.f.markDead(0, fmt.Sprintf("sent a malformed coordinator message: %v", err))
			c.conn.Close()
			return
		}
		switch m.typ {
		case msgRelease:
			c.f.released(m.seq)
		case msgDead:
			c.f.markDead(int(m.rank), "rank 0 reports: "+string(m.reason))
		}
	}
}
