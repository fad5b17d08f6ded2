//go:build ofi

package dtutils

/*
#cgo LDFLAGS: -lfabric
#include <stdlib.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

#define SOF_BATCH 64

// sof_t is one libfabric endpoint with what it needs: fabric, domain,
// address vector, one completion queue, and one registered slab holding
// every message buffer. It lives in C memory; Go reads ent after sof_poll.
typedef struct {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fid_mr *mr;
	void *desc;
	char *slab;
	size_t slab_len;
	struct fi_cq_msg_entry ent[SOF_BATCH];
	struct fi_cq_err_entry err;
	char errbuf[256];
	int wait_fd; // readable when the CQ may have entries (fi_trywait first); -1: none
} sof_t;

static const char *sof_prov(sof_t *s) { return s->info->fabric_attr->prov_name; }
static size_t sof_inject_size(sof_t *s) { return s->info->tx_attr->inject_size; }

// sof_close_ep closes every libfabric object; s and its slab stay, for Go
// code that may still copy into a buffer (sof_free releases them).
static void sof_close_ep(sof_t *s) {
	// The MR first: bound to the endpoint (FI_MR_ENDPOINT), it kept the
	// domain busy when the endpoint went first (fi_close of the domain
	// and fabric returned -FI_EBUSY, and the domain's connections lived on
	// and faulted, libfabric 1.20 tcp;ofi_rxm).
	if (s->mr) fi_close(&s->mr->fid);
	if (s->ep) fi_close(&s->ep->fid);
	if (s->cq) fi_close(&s->cq->fid);
	if (s->av) fi_close(&s->av->fid);
	if (s->domain) fi_close(&s->domain->fid);
	if (s->fabric) fi_close(&s->fabric->fid);
	if (s->info) fi_freeinfo(s->info);
	s->ep = NULL; s->mr = NULL; s->cq = NULL; s->av = NULL; s->domain = NULL; s->fabric = NULL; s->info = NULL;
}

static void sof_free(sof_t *s) {
	sof_close_ep(s);
	free(s->slab);
	free(s);
}

// sof_open opens an RDM endpoint of provider prov (on node and domain when
// given) with a slab of slab_len bytes for messages. It returns 0 or a
// negative libfabric error, with the step that failed in *step.
static int sof_open(sof_t **out, const char *prov, const char *node, const char *domain, size_t slab_len, int rma, const char **step) {
	sof_t *s = calloc(1, sizeof(sof_t));
	if (!s) return -FI_ENOMEM;
	struct fi_info *hints = fi_allocinfo();
	if (!hints) { free(s); return -FI_ENOMEM; }
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG;
	if (rma) hints->caps |= FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	hints->mode = 0; // contexts are plain integers: no FI_CONTEXT
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	if (prov && *prov) hints->fabric_attr->prov_name = strdup(prov);
	if (domain && *domain) hints->domain_attr->name = strdup(domain);
	int ret;
	*step = "fi_getinfo";
	ret = fi_getinfo(FI_VERSION(1, 9), (node && *node) ? node : NULL, NULL, (node && *node) ? FI_SOURCE : 0, hints, &s->info);
	fi_freeinfo(hints);
	if (ret) goto fail;
	*step = "fi_fabric";
	if ((ret = fi_fabric(s->info->fabric_attr, &s->fabric, NULL))) goto fail;
	*step = "fi_domain";
	if ((ret = fi_domain(s->fabric, s->info, &s->domain, NULL))) goto fail;
	struct fi_av_attr av_attr;
	memset(&av_attr, 0, sizeof av_attr);
	av_attr.type = FI_AV_TABLE;
	*step = "fi_av_open";
	if ((ret = fi_av_open(s->domain, &av_attr, &s->av, NULL))) goto fail;
	struct fi_cq_attr cq_attr;
	memset(&cq_attr, 0, sizeof cq_attr);
	cq_attr.format = FI_CQ_FORMAT_MSG;
	// A file descriptor to block on when nobody polls; providers without
	// one get a CQ without a wait object, and the engine backs off instead.
	cq_attr.wait_obj = FI_WAIT_FD;
	s->wait_fd = -1;
	*step = "fi_cq_open";
	if (fi_cq_open(s->domain, &cq_attr, &s->cq, NULL) == 0) {
		if (fi_control(&s->cq->fid, FI_GETWAIT, &s->wait_fd)) s->wait_fd = -1;
	} else {
		cq_attr.wait_obj = FI_WAIT_NONE;
		if ((ret = fi_cq_open(s->domain, &cq_attr, &s->cq, NULL))) goto fail;
	}
	*step = "fi_endpoint";
	if ((ret = fi_endpoint(s->domain, s->info, &s->ep, NULL))) goto fail;
	*step = "fi_ep_bind(av)";
	if ((ret = fi_ep_bind(s->ep, &s->av->fid, 0))) goto fail;
	*step = "fi_ep_bind(cq)";
	if ((ret = fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV))) goto fail;
	*step = "fi_enable";
	if ((ret = fi_enable(s->ep))) goto fail;
	*step = "message buffers";
	if (posix_memalign((void **)&s->slab, 4096, slab_len)) { ret = -FI_ENOMEM; goto fail; }
	memset(s->slab, 0, slab_len);
	s->slab_len = slab_len;
	if (s->info->domain_attr->mr_mode & FI_MR_LOCAL) {
		*step = "fi_mr_reg";
		if ((ret = fi_mr_reg(s->domain, s->slab, slab_len, FI_SEND | FI_RECV, 0, 0, 0, &s->mr, NULL))) goto fail;
		if (s->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
			*step = "fi_mr_bind";
			if ((ret = fi_mr_bind(s->mr, &s->ep->fid, 0))) goto fail;
			*step = "fi_mr_enable";
			if ((ret = fi_mr_enable(s->mr))) goto fail;
		}
		s->desc = fi_mr_desc(s->mr);
	}
	*out = s;
	return 0;
fail:
	sof_free(s);
	return ret;
}

// sof_trywait returns 0 when the engine may block on wait_fd.
static int sof_trywait(sof_t *s) {
	struct fid *f = &s->cq->fid;
	return fi_trywait(s->fabric, &f, 1);
}

static int sof_getname(sof_t *s, void *buf, size_t *len) { return fi_getname(&s->ep->fid, buf, len); }

static int sof_insert(sof_t *s, const void *addr, uint64_t *fi_addr) {
	fi_addr_t a;
	int ret = fi_av_insert(s->av, addr, 1, &a, 0, NULL);
	*fi_addr = a;
	return ret;
}

static ssize_t sof_send(sof_t *s, size_t off, size_t len, uint64_t dest, uint64_t ctx) {
	return fi_send(s->ep, s->slab + off, len, s->desc, dest, (void *)(uintptr_t)ctx);
}

static ssize_t sof_inject(sof_t *s, size_t off, size_t len, uint64_t dest) {
	return fi_inject(s->ep, s->slab + off, len, dest);
}

static ssize_t sof_recv(sof_t *s, size_t off, size_t len, uint64_t ctx) {
	return fi_recv(s->ep, s->slab + off, len, s->desc, FI_ADDR_UNSPEC, (void *)(uintptr_t)ctx);
}

// sof_poll reads up to SOF_BATCH completions into ent. On -FI_EAVAIL it
// reads the error entry into err and returns -FI_EAVAIL.
static ssize_t sof_poll(sof_t *s) {
	ssize_t n = fi_cq_read(s->cq, s->ent, SOF_BATCH);
	if (n == -FI_EAVAIL) {
		memset(&s->err, 0, sizeof s->err);
		if (fi_cq_readerr(s->cq, &s->err, 0) < 0) return -FI_EAGAIN;
		const char *m = fi_cq_strerror(s->cq, s->err.prov_errno, s->err.err_data, s->errbuf, sizeof s->errbuf);
		if (m != s->errbuf) { strncpy(s->errbuf, m ? m : "", sizeof s->errbuf - 1); s->errbuf[sizeof s->errbuf - 1] = 0; }
		return -FI_EAVAIL;
	}
	return n;
}

// The one-sided path (OFIConfig.OneSided): memory registration and
// fi_writemsg/fi_readmsg.

static uint64_t sof_mr_mode(sof_t *s) { return s->info->domain_attr->mr_mode; }
static uint64_t sof_caps(sof_t *s) { return s->info->caps; }

// sof_mr_reg registers len bytes at buf for local and remote reads and
// writes, asking for key (providers with FI_MR_PROV_KEY choose their
// own); it returns the registration, the key peers must use and the local
// descriptor (as integers: Go keeps them, never dereferences them).
static int sof_mr_reg(sof_t *s, void *buf, size_t len, uint64_t key, uintptr_t *mr_out, uint64_t *out_key, uintptr_t *desc) {
	struct fid_mr *mr = NULL;
	uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	int ret = fi_mr_reg(s->domain, buf, len, access, 0, key, 0, &mr, NULL);
	if (ret) return ret;
	if (s->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
		if ((ret = fi_mr_bind(mr, &s->ep->fid, 0)) || (ret = fi_mr_enable(mr))) {
			fi_close(&mr->fid);
			return ret;
		}
	}
	*mr_out = (uintptr_t)mr;
	*out_key = fi_mr_key(mr);
	*desc = (uintptr_t)fi_mr_desc(mr);
	return 0;
}

static void sof_mr_close(uintptr_t mr) { fi_close(&((struct fid_mr *)mr)->fid); }

// sof_rma posts one write (write != 0) or read of len bytes between buf
// and the peer's addr under key. A write completes once the target has
// the data (FI_DELIVERY_COMPLETE), not merely once buf may be reused.
static ssize_t sof_rma(sof_t *s, int write, void *buf, size_t len, uintptr_t desc, uint64_t dest, uint64_t addr, uint64_t key, uint64_t ctx) {
	void *d = (void *)desc;
	struct iovec iov = { buf, len };
	struct fi_rma_iov rma = { addr, len, key };
	struct fi_msg_rma msg;
	memset(&msg, 0, sizeof msg);
	msg.msg_iov = &iov;
	msg.desc = &d;
	msg.iov_count = 1;
	msg.addr = dest;
	msg.rma_iov = &rma;
	msg.rma_iov_count = 1;
	msg.context = (void *)(uintptr_t)ctx;
	if (write) return fi_writemsg(s->ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
	return fi_readmsg(s->ep, &msg, FI_COMPLETION);
}

static uint64_t sof_ent_ctx(sof_t *s, int i) { return (uint64_t)(uintptr_t)s->ent[i].op_context; }
static uint64_t sof_ent_len(sof_t *s, int i) { return s->ent[i].len; }
static uint64_t sof_err_ctx(sof_t *s) { return (uint64_t)(uintptr_t)s->err.op_context; }
static int sof_err_code(sof_t *s) { return s->err.err; }
*/
import "C"

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// OFIAvailable reports whether this build has the ofi provider (the build
// tag "ofi").
const OFIAvailable = true

// ofi: libfabric underneath. One reliable-datagram endpoint (FI_EP_RDM) per
// provider; a queue pair is a peer address in the endpoint's address
// vector plus the peer queue pair's token. Each queue pair runs the tcp
// provider's frame engine (the same frames, the same request, response
// and failure handling) over libfabric messages instead of a socket: its
// output is cut into messages of at most MessageSize bytes sent with
// fi_send, and the messages the endpoint receives are handed to their
// queue pair by token and read back as the same stream. The target's
// progress engine applies every operation after the registry's key and
// bounds checks, so atomics work on providers without FI_ATOMIC
// (tcp;ofi_rxm here). See docs/wire.md, "ofi messages".
//
// Progress is manual (FI_PROGRESS_MANUAL): the completion queue is read by
// whichever thread polls (Process.Progress, or a queue pair's completion
// queue), one at a time so that messages reach their queue pairs in
// order; a fallback goroutine reads it when nobody polls.
type ofiProvider struct {
	proc *Process
	cfg  OFIConfig
	log  *slog.Logger
	s    *C.sof_t // freed by a cleanup once p is unreachable
	name []byte
	pn   string // provider name, e.g. "tcp;ofi_rxm"
	// inject is the largest message sent with fi_inject (no completion,
	// the buffer reusable at once): the provider's inject_size.
	inject int

	// epOpen says whether the endpoint is open; it changes only under
	// epLife's write lock.
	epOpen bool
	host   *tcpProvider // what the frame engine needs of a provider
	rma    *ofiRMA      // the one-sided path (OFIConfig.OneSided), else nil
	slab   []byte       // C memory: ReceiveBuffers then SendBuffers messages

	mu  sync.RWMutex
	qps map[uint64]*ofiQP

	cqmu sync.Mutex // held by whoever reads the completion queue

	smu       sync.Mutex // guards sendFree and sendOwner
	sendFree  indexPool  // free send buffers
	sendOwner []*ofiQP   // queue pair of each send buffer in flight

	calls    *atomic.Uint64
	watching atomic.Bool
	wake     chan struct{} // Process.Idle: watch now
	// efd wakes the watching engine from poll(2) (kick); kicked says it
	// was written and not yet read. Closed by the cleanup.
	efd     int
	kicked  atomic.Bool
	done    chan struct{}
	closed  atomic.Bool
	closeMu sync.Mutex
}

// postRetries bounds postRecv's retries (its back-off reaches 1 ms sleeps,
// so this is about a second).
const postRetries = 1100

// Completion contexts: the kind in the top bits, a buffer (or one-sided
// slot) index below.
const (
	ofiCtxRecv = 1 << 32
	ofiCtxSend = 2 << 32
	ofiCtxRMA  = 3 << 32
)

// NewOFI opens a libfabric endpoint for proc with the provider cfg names.
// It fails with ErrOFIUnavailable when libfabric has no matching provider.
func NewOFI(proc *Process, cfg OFIConfig) (Provider, error) {
	cfg = cfg.withDefaults()
	if err := cfg.VerifyConfig(); err != nil {
		return nil, err
	}
	cprov, cnode, cdom := C.CString(cfg.Provider), C.CString(cfg.Node), C.CString(cfg.Domain)
	defer C.free(unsafe.Pointer(cprov))
	defer C.free(unsafe.Pointer(cnode))
	defer C.free(unsafe.Pointer(cdom))
	slabLen := (cfg.ReceiveBuffers + cfg.SendBuffers) * cfg.MessageSize
	var s *C.sof_t
	var step *C.char
	rma := C.int(0)
	if cfg.OneSided {
		rma = 1
	}
	if ret := C.sof_open(&s, cprov, cnode, cdom, C.size_t(slabLen), rma, &step); ret != 0 {
		err := fiErr(int(ret))
		if C.GoString(step) == "fi_getinfo" {
			err = fmt.Errorf("%w: no provider %q (node %q, domain %q): %v", ErrOFIUnavailable, cfg.Provider, cfg.Node, cfg.Domain, err)
		} else {
			err = fmt.Errorf("dtutils: ofi provider %q: %s: %w", cfg.Provider, C.GoString(step), err)
		}
		return nil, err
	}
	var nb [1024]byte
	n := C.size_t(len(nb))
	if ret := C.sof_getname(s, unsafe.Pointer(&nb[0]), &n); ret != 0 || int(n) > maxAddrLen {
		C.sof_free(s)
		return nil, fmt.Errorf("dtutils: ofi fi_getname: %w (%d bytes)", fiErr(int(ret)), n)
	}
	log := cfg.Logger.With("transport", "ofi", "provider", C.GoString(C.sof_prov(s)), "rank", proc.cfg.Rank)
	p := &ofiProvider{
		proc: proc, cfg: cfg, log: log, s: s, name: append([]byte(nil), nb[:n]...), pn: C.GoString(C.sof_prov(s)), epOpen: true, inject: int(C.sof_inject_size(s)),
		slab:      unsafe.Slice((*byte)(unsafe.Pointer(s.slab)), slabLen),
		qps:       make(map[uint64]*ofiQP),
		sendOwner: make([]*ofiQP, cfg.SendBuffers),
		calls:     &proc.progress.calls,
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		C.sof_free(s)
		return nil, fmt.Errorf("dtutils: ofi eventfd: %w", err)
	}
	p.efd = efd
	runtime.AddCleanup(p, func(r ofiResources) { unix.Close(r.efd); C.sof_free(r.s) }, ofiResources{s, efd})
	tc := DefaultTCPConfig()
	tc.Logger = cfg.Logger
	p.host = &tcpProvider{proc: proc, cfg: tc, log: log, qps: make(map[uint64]*tcpQP)}
	p.sendFree = newIndexPool(cfg.SendBuffers)
	if cfg.OneSided {
		mode := uint64(C.sof_mr_mode(s))
		p.rma = newOFIRMA(p, mode&C.FI_MR_VIRT_ADDR != 0, mode&C.FI_MR_LOCAL != 0)
		log.Debug("ofi one-sided path on", "mr_mode", mode)
	}
	for i := 0; i < cfg.ReceiveBuffers; i++ {
		if err := p.postRecv(i); err != nil {
			p.closeEP()
			return nil, err
		}
	}
	inProcess.Store(string(p.name), p)
	proc.progress.add(p)
	go p.engine()
	go p.keeper()
	return p, nil
}

// epLife is held (read) around every call into libfabric, by every
// provider of the process, and (write) to close an endpoint: libfabric's
// shm provider can fault when one endpoint closes while a call on another
// endpoint of the same process is under way (seen in fi_send and in
// fi_cq_read, with the two ends of a queue pair in one process). One
// provider per process, the usual case, pays one uncontended read lock.
var epLife sync.RWMutex

// inProcess maps the endpoint names of this OS process's open providers
// to them, so that a queue pair between two of them (tests, mostly) can
// keep its peer's endpoint open while it sends: see ofiQP.post.
var inProcess sync.Map

// ofiResources are what a provider's cleanup frees once it is unreachable:
// the endpoint's C state with the message buffers Go code may still touch,
// and the engine's eventfd.
type ofiResources struct {
	s   *C.sof_t
	efd int
}

// fiErr turns a negative libfabric return into an error.
func fiErr(ret int) error {
	if ret == 0 {
		return nil
	}
	if ret > 0 {
		ret = -ret
	}
	return fmt.Errorf("%s (%d)", C.GoString(C.fi_strerror(C.int(-ret))), ret)
}

// ProviderName returns the libfabric provider in use, e.g. "tcp;ofi_rxm".
func (p *ofiProvider) ProviderName() string { return p.pn }

func (p *ofiProvider) Transport() string { return "ofi" }
func (p *ofiProvider) Process() *Process { return p.proc }
func (p *ofiProvider) recvBuf(i int) []byte {
	return p.slab[i*p.cfg.MessageSize : (i+1)*p.cfg.MessageSize]
}
func (p *ofiProvider) sendBuf(i int) []byte { return p.recvBuf(p.cfg.ReceiveBuffers + i) }

// postRecv posts message buffer i for receiving. A provider that says
// "again" gets progress (when no other thread is reading the completion
// queue — the caller may be that thread) and a bounded number of retries.
func (p *ofiProvider) postRecv(i int) error {
	b := Backoff{}
	for try := 0; ; try++ {
		epLife.RLock()
		if !p.epOpen {
			epLife.RUnlock()
			return ErrClosed
		}
		ret := C.sof_recv(p.s, C.size_t(i*p.cfg.MessageSize), C.size_t(p.cfg.MessageSize), C.uint64_t(ofiCtxRecv|i))
		epLife.RUnlock()
		switch {
		case ret == 0:
			return nil
		case ret == -C.FI_EAGAIN && !p.closed.Load() && try < postRetries:
			if !p.poll() {
				b.Wait()
			}
			continue
		}
		return fmt.Errorf("dtutils: ofi fi_recv: %w", fiErr(int(ret)))
	}
}

func (p *ofiProvider) NewQueuePair() (QueuePair, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	tq, err := p.host.NewQueuePair()
	if err != nil {
		return nil, err
	}
	q := &ofiQP{tcpQP: tq.(*tcpQP), prov: p}
	q.link = q
	q.cq.progress = q.progress
	q.cq.idle = p.idle
	p.mu.Lock()
	p.qps[q.token] = q
	p.mu.Unlock()
	return q, nil
}

func (p *ofiProvider) Close() error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed.Swap(true) {
		return nil
	}
	p.mu.RLock()
	qps := make([]*ofiQP, 0, len(p.qps))
	for _, q := range p.qps {
		qps = append(qps, q)
	}
	p.mu.RUnlock()
	for _, q := range qps {
		q.Close()
	}
	close(p.done)
	p.kick() // out of poll(2)
	p.proc.progress.remove(p)
	inProcess.Delete(string(p.name))
	p.closeEP()
	return nil
}

// closeEP closes the endpoint once no call on it is under way.
func (p *ofiProvider) closeEP() {
	if p.rma != nil {
		p.rma.unhook()
	}
	epLife.Lock()
	if p.epOpen {
		p.epOpen = false
		if p.rma != nil {
			p.rma.closeAll() // registrations before the endpoint they are bound to
		}
		C.sof_close_ep(p.s)
	}
	epLife.Unlock()
}

// mrReg registers b (mapped memory, never the Go heap) with the provider,
// asking for key; epLife is held (read) and the endpoint open.
func (p *ofiProvider) mrReg(b []byte, key uint64) (ofiMR, error) {
	var m ofiMR
	var mr, desc C.uintptr_t
	var peerKey C.uint64_t
	if ret := C.sof_mr_reg(p.s, unsafe.Pointer(&b[0]), C.size_t(len(b)), C.uint64_t(key), &mr, &peerKey, &desc); ret != 0 {
		return m, fmt.Errorf("dtutils: ofi fi_mr_reg: %w", fiErr(int(ret)))
	}
	m.mr, m.desc, m.key = uintptr(mr), uintptr(desc), uint64(peerKey)
	m.base = uint64(uintptr(unsafe.Pointer(&b[0])))
	m.size = uint64(len(b))
	return m, nil
}

// mrClose closes a registration; epLife is held and the endpoint open.
func mrClose(m ofiMR) { C.sof_mr_close(C.uintptr_t(m.mr)) }

// rmaPost posts an fi_write (write) or fi_read of b at the peer's addr
// under key, with completion context ctx. It returns 0 or a negative
// libfabric error (-FI_EAGAIN: try again after progress).
func (p *ofiProvider) rmaPost(write bool, b []byte, desc uintptr, dest, addr, key, ctx uint64) int {
	w := C.int(0)
	if write {
		w = 1
	}
	epLife.RLock()
	defer epLife.RUnlock()
	if !p.epOpen {
		return -C.FI_ECANCELED
	}
	return int(C.sof_rma(p.s, w, unsafe.Pointer(&b[0]), C.size_t(len(b)), C.uintptr_t(desc), C.uint64_t(dest), C.uint64_t(addr), C.uint64_t(key), C.uint64_t(ctx)))
}

// Libfabric return codes the one-sided path tells apart.
const (
	fiEAgain    = -C.FI_EAGAIN
	fiECanceled = -C.FI_ECANCELED
)

// progress reads the completion queue (progressor).
func (p *ofiProvider) progress() bool { return p.poll() }

func (p *ofiProvider) idle() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
	p.kick()
}

// poll reads the completion queue once, unless another thread is reading
// it, and hands received messages to their queue pairs. It reports
// whether it found anything.
func (p *ofiProvider) poll() bool {
	if !p.cqmu.TryLock() {
		return false
	}
	defer p.cqmu.Unlock()
	did := false
	for {
		epLife.RLock()
		if !p.epOpen {
			epLife.RUnlock()
			return did
		}
		n := int(C.sof_poll(p.s)) // entries stay in p.s until the next poll, which cqmu excludes
		epLife.RUnlock()
		switch {
		case n == -C.FI_EAVAIL:
			p.failed(uint64(C.sof_err_ctx(p.s)), int(C.sof_err_code(p.s)), C.GoString(&p.s.errbuf[0]))
			did = true
			continue
		case n <= 0:
			return did
		}
		did = true
		for i := 0; i < n; i++ {
			ctx := uint64(C.sof_ent_ctx(p.s, C.int(i)))
			idx := int(ctx & (1<<32 - 1))
			switch ctx &^ (1<<32 - 1) {
			case ofiCtxRecv:
				p.received(idx, int(C.sof_ent_len(p.s, C.int(i))))
			case ofiCtxSend:
				p.sent(idx)
			case ofiCtxRMA:
				p.rma.done(idx, StatusSuccess, nil)
			}
		}
		if n < C.SOF_BATCH {
			return did
		}
	}
}

// received hands message buffer i (n bytes) to its queue pair; cqmu is held.
func (p *ofiProvider) received(i, n int) {
	msg := p.recvBuf(i)[:n]
	h, err := parseOFIHeader(msg)
	if err != nil {
		p.log.Warn("dropping a malformed ofi message", "err", err)
		p.repost(i)
		return
	}
	p.mu.RLock()
	q := p.qps[h.token]
	p.mu.RUnlock()
	if q == nil {
		p.log.Debug("dropping an ofi message for an unknown queue pair", "token", h.token)
		p.repost(i)
		return
	}
	q.heard.Add(1)
	q.deliver(ofiMsg{buf: i, off: ofiHeader, n: n, seq: h.seq, kind: h.kind})
}

// repost gives message buffer i back to the endpoint for receiving.
func (p *ofiProvider) repost(i int) {
	if p.closed.Load() {
		return
	}
	if err := p.postRecv(i); err != nil {
		p.log.Error("ofi receive buffer lost", "err", err)
	}
}

// sent frees send buffer i; cqmu is held.
func (p *ofiProvider) sent(i int) {
	p.smu.Lock()
	p.sendOwner[i] = nil
	p.sendFree.put(i)
	p.smu.Unlock()
}

// failed handles an error completion: a send that failed loses its queue
// pair's connection (the peer is gone); cqmu is held.
func (p *ofiProvider) failed(ctx uint64, code int, msg string) {
	idx := int(ctx & (1<<32 - 1))
	switch ctx &^ (1<<32 - 1) {
	case ofiCtxSend:
		p.smu.Lock()
		q := p.sendOwner[idx]
		p.smu.Unlock()
		p.sent(idx)
		if q != nil {
			go q.fail(fmt.Errorf("%w: rank %d: ofi send failed: %s (%d)", ErrConnectionLost, q.peerRank, msg, code))
		}
	case ofiCtxRMA:
		st := StatusConnectionLost
		if code == C.FI_EACCES || code == C.FI_EINVAL || code == C.FI_EKEYREJECTED {
			st = StatusRemoteAccess
		}
		p.rma.done(idx, st, fmt.Errorf("ofi one-sided operation failed: %s (%d)", msg, code))
	case ofiCtxRecv:
		if code != C.FI_ECANCELED {
			p.log.Warn("ofi receive failed", "err", msg, "code", code)
			p.repost(idx)
		}
	default:
		p.log.Warn("ofi completion error", "err", msg, "code", code)
	}
}

// engine makes progress when no thread of the process polls: it stands
// by while Progress is called at a polling rate (as the tcp engine does)
// and otherwise polls the completion queue and every queue pair itself,
// backing off to a sleep when nothing moves.
func (p *ofiProvider) engine() {
	timer := time.NewTimer(standBy)
	defer timer.Stop()
	var qps []*ofiQP
	pfd := []unix.PollFd{{Fd: int32(p.s.wait_fd), Events: unix.POLLIN}, {Fd: int32(p.efd), Events: unix.POLLIN}}
	for {
		if !standByWhilePolled(p.calls, timer, p.wake, p.done, nil) {
			return
		}
		p.watching.Store(true)
		// Its waits stay bounded at watchTimeout (the tcp engine's grow):
		// a wait holds epLife, which an endpoint's close in any provider
		// of the process waits for, and one engine per provider wakes 50
		// times a second at most.
		w := newWatch(p.calls, watchTimeout)
		b := Backoff{}
		for {
			did := p.poll()
			p.mu.RLock()
			qps = qps[:0]
			for _, q := range p.qps {
				qps = append(qps, q)
			}
			p.mu.RUnlock()
			for _, q := range qps {
				if q.connected.Load() && q.tcpQP.progress() {
					did = true
				}
			}
			clear(qps)
			select {
			case <-p.done:
				p.watching.Store(false)
				return
			default:
			}
			switch {
			case did:
				b.Reset()
			case !p.block(pfd):
				b.Wait()
			}
			if w.pollersBack() {
				break
			}
		}
		p.watching.Store(false)
		timer.Reset(standBy)
	}
}

// block waits in poll(2) until the completion queue's wait descriptor
// says there may be completions, a kick, or watchTimeout; it reports
// false, having waited for nothing, when the provider has no wait
// descriptor or fi_trywait says to poll again first.
func (p *ofiProvider) block(pfd []unix.PollFd) bool {
	if pfd[0].Fd < 0 {
		return false
	}
	epLife.RLock() // the descriptor belongs to the endpoint
	defer epLife.RUnlock()
	if !p.epOpen || C.sof_trywait(p.s) != 0 {
		return false
	}
	unix.Poll(pfd, watchTimeout)
	if pfd[1].Revents != 0 {
		var b [8]byte
		unix.Read(p.efd, b[:])
		p.kicked.Store(false)
	}
	return true
}

// keeper probes the queue pairs every tenth of PeerTimeout, and reads the
// completion queue once first, on a goroutine of its own: the engine, or
// the thread polling for it, may be inside an Operator for longer than
// PeerTimeout, and while it is nobody else reads the completion queue, so
// the peer's probes would go unanswered (and the answers to ours
// unheard): a call longer than PeerTimeout failed as lost. Its read finds
// nothing while the engine reads (cqmu is taken, or the queue is empty);
// one that found something kicks the engine, which may be asleep in
// poll(2) with what the keeper handed its queue pairs.
func (p *ofiProvider) keeper() {
	t := time.NewTicker(p.cfg.PeerTimeout / 10)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
		}
		if p.poll() {
			p.kick()
		}
		p.probe()
	}
}

// probe watches the queue pairs that await answers: one that has heard
// nothing from its peer for a tenth of PeerTimeout sends a probe (the peer
// answers it), and one that has heard nothing for PeerTimeout fails. A
// peer that died after it took a request leaves no error until something
// is sent to it, and a send to a vanished host may never fail. Only the
// keeper calls it.
func (p *ofiProvider) probe() {
	now := time.Now()
	every := p.cfg.PeerTimeout / 10
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, q := range p.qps {
		h := q.heard.Load()
		q.mu.Lock()
		waiting := q.pending.len() > 0 && q.lostErr == nil && q.connected.Load()
		q.mu.Unlock()
		switch {
		case !waiting:
			q.quietSince = time.Time{}
			continue
		case h != q.lastHeard || q.quietSince.IsZero():
			q.lastHeard, q.quietSince = h, now
			continue
		}
		quiet := now.Sub(q.quietSince)
		if quiet >= p.cfg.PeerTimeout {
			go q.fail(fmt.Errorf("%w: rank %d silent for %v with answers due (PeerTimeout)", ErrConnectionLost, q.peerRank, quiet.Round(time.Millisecond)))
			q.quietSince = time.Time{}
			continue
		}
		if quiet >= every && now.Sub(q.probed) >= every {
			q.probed = now
			go q.control(ofiKindProbe)
		}
	}
}

// control sends a message without frames (probe or probe answer) in the
// queue pair's sequence. A send that fails fails the queue pair.
func (q *ofiQP) control(kind uint8) { q.controlBody(kind, nil) }

// awaitConnected waits, at most PeerTimeout, until Connect has set the
// peer's address and token, and reports whether it has. A peer that
// connected first may send a region question or a probe before Connect
// here is done, and the answer, sent from a goroutine, must not read the
// address before Connect wrote it (it raced with Connect, and would have
// gone to address 0 with token 0). Once connected, one atomic load.
func (q *ofiQP) awaitConnected() bool {
	for deadline := time.Now().Add(q.prov.cfg.PeerTimeout); !q.connected.Load(); {
		if q.closed.Load() || time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// controlBody sends a control message with a body (the one-sided path's
// region questions and answers), as control does.
func (q *ofiQP) controlBody(kind uint8, body []byte) {
	if !q.awaitConnected() {
		return
	}
	q.wmu.Lock()
	defer q.wmu.Unlock()
	for try := 0; try < 100; try++ {
		i, ok := q.prov.takeSendBuf(q)
		if !ok {
			q.prov.poll()
			time.Sleep(time.Millisecond)
			continue
		}
		buf := q.prov.sendBuf(i)
		ofiMsgHeader{token: q.peerToken.Load(), kind: kind, seq: q.seq}.put(buf)
		copy(buf[ofiHeader:], body)
		switch err := q.post(i, ofiHeader+len(body)); {
		case err == nil:
			q.seq++
			return
		case err != unix.EAGAIN:
			if !errors.Is(err, net.ErrClosed) {
				go q.fail(err)
			}
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// ofiQP is a queue pair over the provider's endpoint: the frame engine of
// tcpQP, linked to libfabric messages.
type ofiQP struct {
	*tcpQP
	prov  *ofiProvider
	dest  uint64       // the peer's fi_addr_t
	local *ofiProvider // the peer's provider, when it is in this process

	seq uint32 // of the next message sent; wmu (or closing) holds it

	inMu   sync.Mutex
	in     fifo[ofiMsg] // received messages, in order, not yet read
	early  []ofiMsg     // received ahead of their turn
	next   uint32       // sequence number of the message due next
	isShut bool

	// The prober's state (see probe): messages received, the count at its
	// last look, since when it has not changed while answers were due, and
	// when the last probe went.
	heard              atomic.Uint64
	lastHeard          uint64
	quietSince, probed time.Time

	rmaQP // the one-sided path's state (OFIConfig.OneSided)
}

// ofiMsg is a received message buffer and how much of it was read.
type ofiMsg struct {
	buf, off, n int
	seq         uint32
	kind        uint8
}

func (q *ofiQP) Endpoint() []byte {
	return endpoint{transport: transportOFI, rank: q.prov.proc.cfg.Rank, token: q.token, addr: string(q.prov.name)}.marshal()
}

func (q *ofiQP) Connect(remote []byte) error {
	ep, err := parseEndpoint(remote, transportOFI)
	if err != nil {
		return err
	}
	if q.connected.Load() {
		return fmt.Errorf("%w: queue pair already connected", ErrBadEndpoint)
	}
	if len(ep.addr) == 0 {
		return fmt.Errorf("%w: empty ofi address", ErrBadEndpoint)
	}
	addr := []byte(ep.addr)
	var fa C.uint64_t
	epLife.RLock()
	closed := !q.prov.epOpen
	var ret C.int
	if !closed {
		ret = C.sof_insert(q.prov.s, unsafe.Pointer(&addr[0]), &fa)
	}
	epLife.RUnlock()
	if closed {
		return ErrClosed
	}
	if ret != 1 {
		return fmt.Errorf("%w: ofi fi_av_insert of rank %d's address: %v", ErrBadEndpoint, ep.rank, fiErr(int(ret)))
	}
	q.dest = uint64(fa)
	if l, ok := inProcess.Load(ep.addr); ok {
		q.local = l.(*ofiProvider)
	}
	q.peerToken.Store(ep.token)
	q.start(ep.rank)
	return nil
}

// progress reads the completion queue, then the queue pair's stream.
func (q *ofiQP) progress() bool {
	a := q.prov.poll()
	return q.tcpQP.progress() || a
}

// deliver queues a received message in sequence order; cqmu is held.
// Messages ahead of their turn wait in early.
func (q *ofiQP) deliver(m ofiMsg) {
	q.inMu.Lock()
	if q.isShut {
		q.inMu.Unlock()
		q.prov.repost(m.buf)
		return
	}
	if m.seq != q.next {
		q.early = append(q.early, m)
		q.inMu.Unlock()
		return
	}
	closed := false
	for {
		q.next++
		switch m.kind {
		case ofiKindData:
			q.in.push(m)
		case ofiKindClose:
			closed = true
			q.prov.repost(m.buf)
		case ofiKindProbe:
			go q.control(ofiKindAck)
			q.prov.repost(m.buf)
		case ofiKindRegionAsk, ofiKindRegionAnswer:
			q.regionMessage(m.kind, q.prov.recvBuf(m.buf)[ofiHeader:m.n])
			q.prov.repost(m.buf)
		default:
			q.prov.repost(m.buf)
		}
		k := slices.IndexFunc(q.early, func(e ofiMsg) bool { return e.seq == q.next })
		if k < 0 {
			break
		}
		m = q.early[k]
		q.early = slices.Delete(q.early, k, k+1)
	}
	q.inMu.Unlock()
	if closed {
		go q.fail(fmt.Errorf("%w: rank %d closed its queue pair: %w", ErrConnectionLost, q.peerRank, io.EOF))
	}
}

// io implements frameLink.
func (q *ofiQP) io(write bool, b []byte) (int, error) {
	if write {
		return q.send(b)
	}
	q.inMu.Lock()
	if q.isShut {
		q.inMu.Unlock()
		return 0, net.ErrClosed
	}
	got := 0
	for got < len(b) && q.in.len() > 0 {
		m := q.in.front()
		k := copy(b[got:], q.prov.recvBuf(m.buf)[m.off:m.n])
		got += k
		m.off += k
		if m.off == m.n {
			i := m.buf
			q.in.pop() // zeroes *m
			q.prov.repost(i)
		}
	}
	q.inMu.Unlock()
	if got == 0 {
		return 0, unix.EAGAIN
	}
	return got, nil
}

// send sends the first bytes of b as one message.
func (q *ofiQP) send(b []byte) (int, error) {
	p := q.prov
	i, ok := p.takeSendBuf(q)
	if !ok {
		p.poll() // send completions free buffers
		if i, ok = p.takeSendBuf(q); !ok {
			return 0, unix.EAGAIN
		}
	}
	buf := p.sendBuf(i)
	ofiMsgHeader{token: q.peerToken.Load(), kind: ofiKindData, seq: q.seq}.put(buf)
	n := copy(buf[ofiHeader:], b)
	if err := q.post(i, ofiHeader+n); err != nil {
		return 0, err
	}
	q.seq++
	return n, nil
}

// post sends the first n bytes of send buffer i to the peer.
func (q *ofiQP) post(i, n int) error {
	p := q.prov
	for {
		off := C.size_t((p.cfg.ReceiveBuffers + i) * p.cfg.MessageSize)
		inject := n <= p.inject
		epLife.RLock()
		if l := q.local; l != nil && !l.epOpen {
			// The peer endpoint is in this process and closed: libfabric's
			// shm provider faults writing to it.
			epLife.RUnlock()
			p.sent(i)
			return fmt.Errorf("%w: rank %d closed its provider", ErrConnectionLost, q.peerRank)
		}
		ret := C.ssize_t(-C.FI_ECANCELED)
		switch {
		case !p.epOpen:
		case inject:
			// Small: the provider copies it now and reports no completion.
			ret = C.sof_inject(p.s, off, C.size_t(n), C.uint64_t(q.dest))
		default:
			ret = C.sof_send(p.s, off, C.size_t(n), C.uint64_t(q.dest), C.uint64_t(ofiCtxSend|i))
		}
		epLife.RUnlock()
		switch {
		case ret == 0 && inject:
			p.sent(i)
			return nil
		case ret == -C.FI_ECANCELED:
			p.sent(i)
			return net.ErrClosed
		case ret == 0:
			return nil
		case ret == -C.FI_EAGAIN:
			if !p.poll() {
				p.sent(i)
				return unix.EAGAIN
			}
			continue
		}
		p.sent(i)
		return fmt.Errorf("%w: ofi fi_send to rank %d: %v", ErrConnectionLost, q.peerRank, fiErr(int(ret)))
	}
}

// takeSendBuf takes a free send buffer for q.
func (p *ofiProvider) takeSendBuf(q *ofiQP) (int, bool) {
	p.smu.Lock()
	defer p.smu.Unlock()
	i, ok := p.sendFree.take()
	if ok {
		p.sendOwner[i] = q
	}
	return i, ok
}

// kick implements frameLink: a post with nobody polling wakes the engine.
func (q *ofiQP) kick() { q.prov.kick() }

func (p *ofiProvider) kick() {
	if !p.watching.Load() || p.kicked.Load() || p.kicked.Swap(true) {
		return
	}
	var one [8]byte
	one[0] = 1
	unix.Write(p.efd, one[:])
}

// shut implements frameLink: the queue pair takes no more messages and
// gives back those it holds.
func (q *ofiQP) shut() {
	q.inMu.Lock()
	q.isShut = true
	var held []int
	for {
		m, ok := q.in.pop()
		if !ok {
			break
		}
		held = append(held, m.buf)
	}
	for _, m := range q.early {
		held = append(held, m.buf)
	}
	q.early = nil
	q.inMu.Unlock()
	for _, i := range held {
		q.prov.repost(i)
	}
	if q.prov.rma != nil {
		q.rmaFailed()
	}
	q.prov.mu.Lock()
	delete(q.prov.qps, q.token)
	q.prov.mu.Unlock()
}

// Close tells the peer, then closes: its queue pair fails with
// ErrConnectionLost as over tcp, instead of waiting for answers.
func (q *ofiQP) Close() error {
	if q.connected.Load() && !q.closed.Load() {
		q.wmu.Lock() // the close message comes after every data message
		if i, ok := q.prov.takeSendBuf(q); ok {
			ofiMsgHeader{token: q.peerToken.Load(), kind: ofiKindClose, seq: q.seq}.put(q.prov.sendBuf(i))
			if err := q.post(i, ofiHeader); err != nil && !errors.Is(err, net.ErrClosed) {
				q.prov.log.Debug("ofi close message not sent", "peer", q.peerRank, "err", err)
			} else {
				q.seq++
			}
		}
		q.wmu.Unlock()
	}
	return q.tcpQP.Close()
}
