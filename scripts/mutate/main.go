// Command mutate checks that the tests catch protocol bugs: it applies each
// named mutation below, one at a time, to a scratch copy of the module, runs
// the mutated package's tests with a time limit, and prints a table —
// mutation, caught or survived, by which test, seconds. It exits non-zero
// when a mutation survives, is caught only after -slow, or no longer
// applies (the code it changes moved: update the table).
//
//	go run ./scripts/mutate [-only NAME,...] [-md FILE]
//
// make mutate runs it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"
)

// mutation is one deliberate bug: Old, which must occur exactly once in
// File, becomes New.
type mutation struct {
	Name, Rule string // Rule: what the protocol requires, in a few words
	File       string
	Old, New   string
	Pkg        string // the package whose tests must catch it
	// Focus names the tests written for this rule (a -run pattern): they
	// run first; when they pass, the whole package runs.
	Focus string
	// Tags are build tags the tests need (e.g. "ofi": cgo and
	// libfabric-dev; without libfabric the mutation is reported skipped).
	Tags string
}

var mutations = []mutation{
	{Name: "transmitter-completed", Focus: "TestTransmitterCompletedIsFMinusOne|TestTransmitterRecyclingRule", Rule: "Completed is F−1: memory tagged f is free once F ≥ f+2",
		File: "dtutils/transmitter.go", Pkg: "./dtutils",
		Old: "\t\treturn f - 1\n", New: "\t\treturn f\n"},
	{Name: "transmitter-flush", Focus: "TestTransmitterRecyclingRule", Rule: "Flush advances the flush number twice",
		File: "dtutils/transmitter.go", Pkg: "./dtutils",
		Old: "target := t.flushed.Load() + 2", New: "target := t.flushed.Load() + 1"},
	{Name: "flush-numbering", Focus: "TestTransmitterHammer|TestTransmitterSignalsSelectively", Rule: "an operation whose group is past F is signaled",
		File: "dtutils/transmitter.go", Pkg: "./dtutils",
		Old: "return ticket >= (f+1)*t.k", New: "return ticket >= (f+2)*t.k"},
	{Name: "tcp-write-length", Focus: "TestTCPMalformedFramesFromPeer", Rule: "a write frame's payload is its length",
		File: "dtutils/wire.go", Pkg: "./dtutils",
		Old: "\t\tif !resp {\n\t\t\twant = f.length\n", New: "\t\tif !resp {\n\t\t\twant = uint64(f.payload)\n"},
	{Name: "key-check", Focus: "TestTransportSuite|TestTCPRandomAccessNeverEscapes", Rule: "every remote operation proves the region's key",
		File: "alloc/registry.go", Pkg: "./dtutils",
		Old: "if l.Key != r.key {", New: "if false && l.Key != r.key {"},
	{Name: "bounds-check", Focus: "TestTransportSuite|TestTCPRandomAccessNeverEscapes", Rule: "every remote operation stays inside its region",
		File: "alloc/registry.go", Pkg: "./dtutils",
		Old: "if !checkRange(l.Offset, l.Length, uint64(len(r.mem))) {", New: "if false {"},
	{Name: "shm-map-key", Focus: "TestTransportSuite|TestTransmitterFailure", Rule: "shm hands a region's memfd only for its key",
		File: "dtutils/shm.go", Pkg: "./dtutils",
		Old: "if !ok || r.Key() != key {", New: "if !ok || r.Key() != key && false {"},
	{Name: "hotwait-spin", Focus: "TestHotWaitSpinsBeforeSleeping", Rule: "HotWait spins before it yields or sleeps",
		File: "dtutils/backoff.go", Pkg: "./dtutils",
		Old: "\tcase d < w.Spin:\n", New: "\tcase false:\n"},
	{Name: "cq-doorbell", Focus: "TestCQWaiterWokenByDoorbell", Rule: "a completion wakes a waiter asleep on the doorbell",
		File: "dtutils/cq.go", Pkg: "./dtutils",
		Old: "\tif q.sleepers.Load() > 0 {\n\t\tselect {\n\t\tcase q.bell <- struct{}{}:", New: "\tif false {\n\t\tselect {\n\t\tcase q.bell <- struct{}{}:"},
	{Name: "doorbell-fence", Focus: "TestDoorbellNoLostWakeup", Rule: "a producer looks for sleepers only after its entry is visible (store-load fence)",
		File: "dtutils/ring.go", Pkg: "./dtutils",
		Old: "\tstoreLoadFence()\n\tif r.sleepers().Load() > 0 {", New: "\tif r.sleepers().Load() > 0 {"},
	{Name: "seal-order", Focus: "TestCrossProcessSealVisibility", Rule: "a write's last word is stored last, after the bytes it seals",
		File: "dtutils/apply.go", Pkg: "./dtutils",
		Old: "\t\tcopy(dst[:n-8], src[:n-8])\n\t\tw := *(*uint64)(unsafe.Pointer(&src[n-8])) // native order: bytes move unchanged\n\t\tstoreRelease(unsafe.Pointer(&dst[n-8]), w)\n",
		New: "\t\tw := *(*uint64)(unsafe.Pointer(&src[n-8])) // native order: bytes move unchanged\n\t\tstoreRelease(unsafe.Pointer(&dst[n-8]), w)\n\t\tcopy(dst[:n-8], src[:n-8])\n"},
	{Name: "shm-direct-key", Focus: "TestTransmitterWriteChecksEveryAccess", Rule: "a direct shm write proves the key even when the mapping is cached",
		File: "dtutils/syncqp.go", Pkg: "./dtutils",
		Old: "if m == nil || m.id != remote.Region || m.key != remote.Key {", New: "if m == nil || m.id != remote.Region {"},
	{Name: "shm-direct-bounds", Focus: "TestTransmitterWriteChecksEveryAccess", Rule: "a direct shm write stays inside the mapped region",
		File: "dtutils/syncqp.go", Pkg: "./dtutils",
		Old: "if off > uint64(len(m.mem)) || n > uint64(len(m.mem))-off {", New: "if off > uint64(len(m.mem)) {"},
	{Name: "rconn-position-tag", Focus: "TestStreamBothWays", Rule: "an rconn record is new only when its validity word carries its position's tag",
		File: "rconn/conn.go", Pkg: "./rconn",
		Old: "if uint32(v>>32) != tag(c.head) {", New: "if v == 0 {"},
	{Name: "rconn-room", Focus: "TestDeadlines|TestStreamBothWays", Rule: "an rconn writer waits for the reader to free room",
		File: "rconn/conn.go", Pkg: "./rconn",
		Old: "\t\tif free() {\n\t\t\treturn nil\n\t\t}", New: "\t\tif true {\n\t\t\treturn nil\n\t\t}"},
	{Name: "record-seal", Focus: "TestRecordRoundTrip|TestSealSeparatesNeighbours|FuzzRecordParse", Rule: "a record is complete only when its seal matches its header",
		File: "riutils/wire.go", Pkg: "./riutils",
		Old: "\tif seal != sealOf(h0, h1) {\n", New: "\tif seal == 0 {\n"},
	{Name: "reply-seal", Focus: "TestReplySealCarriesSequence", Rule: "a reply is this call's only when its seal carries the call's sequence",
		File: "riutils/remote.go", Pkg: "./riutils",
		Old: "if word(obj.slot, end-recordSeal).Load() == sealOf(h0, obj.seq) {", New: "if word(obj.slot, end-recordSeal).Load() != 0 {"},
	{Name: "feedback-off-by-one", Focus: "TestFeedbackCountsConsumedChunks|TestFeedbackAfterWrap", Rule: "feedback counts the chunks consumed, no more",
		File: "riutils/recv.go", Pkg: "./riutils",
		Old: "if err := r.feedback(r.consumed | r.request); err != nil {", New: "if err := r.feedback((r.consumed + 1) | r.request); err != nil {"},
	{Name: "growth-at-end", Focus: "TestGrowthInTheMiddle", Rule: "grown chunks go after the current one, on both sides",
		File: "riutils/recv.go", Pkg: "./riutils",
		Old: "r.chunks = append(r.chunks[:r.cur+1], append(batch, r.chunks[r.cur+1:]...)...)", New: "r.chunks = append(r.chunks, batch...)"},
	{Name: "inner-buffer-flag", Focus: "TestInnerRecordFormat", Rule: "an inner record's argument count excludes its buffer flag",
		File: "riutils/wire.go", Pkg: "./riutils",
		Old: "na, nb, off := uint64(w&^innerHasBuf), uint64(0), uint64(innerHeader)", New: "na, nb, off := uint64(w), uint64(0), uint64(innerHeader)"},
	{Name: "run-count-stale", Focus: "TestAggregatorRuns", Rule: "a run's header counts every call appended to it",
		File: "riutils/aggregator.go", Pkg: "./riutils",
		Old: "binary.LittleEndian.PutUint32(d.buf[recordHeader+d.runAt+4:], runWord(na, d.runN))", New: "binary.LittleEndian.PutUint32(d.buf[recordHeader+d.runAt+4:], runWord(na, d.runN-1))"},
	{Name: "run-any-size", Focus: "TestAggregatorRuns", Rule: "only calls of the run's argument size extend it",
		File: "riutils/aggregator.go", Pkg: "./riutils",
		Old: "return d.runN > 0 && nb == 0 && h == d.runH && na == d.runNA && d.runN < maxRunCalls", New: "return d.runN > 0 && nb == 0 && h == d.runH && na <= d.runNA && d.runN < maxRunCalls"},
	{Name: "run-count-overflow", Focus: "TestAggregatorRuns", Rule: "a run holds at most the calls its count field can say",
		File: "riutils/aggregator.go", Pkg: "./riutils",
		Old: "return d.runN > 0 && nb == 0 && h == d.runH && na == d.runNA && d.runN < maxRunCalls", New: "return d.runN > 0 && nb == 0 && h == d.runH && na == d.runNA"},
	{Name: "run-survives-batch", Focus: "TestAggregatorRuns", Rule: "a sent or kept batch ends its run",
		File: "riutils/aggregator.go", Pkg: "./riutils",
		Old: "d.batch, d.buf, d.used, d.runN = alloc.Memory{}, nil, 0, 0", New: "d.batch, d.buf, d.used = alloc.Memory{}, nil, 0"},
	{Name: "run-overrun", Focus: "TestInnerRecordFormat", Rule: "a run that overruns its batch is a protocol error",
		File: "riutils/wire.go", Pkg: "./riutils",
		Old: "\tsize = innerHeader + count*stride\n\tif size > len(b) {", New: "\tsize = innerHeader + count*stride\n\tif size > len(b)+1<<20 {"},
	{Name: "trad-flush-holds-tail", Focus: "TestFlushDeliversEveryCall", Rule: "trad Flush sends a partly filled batch",
		File: "riutils/aggregator.go", Pkg: "./riutils",
		Old: "func (a *Aggregator) flush(dst dsfabric.ThreadID, d *aggDst) error {\n\tif d.used == 0 {", New: "func (a *Aggregator) flush(dst dsfabric.ThreadID, d *aggDst) error {\n\tif d.used < a.cfg.FlushSize/2 {"},
	{Name: "ovfl-flush-keeps-last", Focus: "TestFlushDeliversEveryCall", Rule: "ovfl Flush sends every kept call",
		File: "riutils/aggregator.go", Pkg: "./riutils",
		Old: "\t\tif len(d.queue) == sent {\n\t\t\tif d.used == 0 {", New: "\t\tif len(d.queue) == sent {\n\t\t\tif d.used >= 0 {"},
	{Name: "ovfl-retry-fails-at-bound", Focus: "TestAggregatorOvflRetryWaitsAtBound", Rule: "under Retry an ovfl call at MaxExceeding waits for room",
		File: "riutils/aggregator.go", Pkg: "./riutils",
		Old: "if atBound && a.m.p.cfg.Policy == Retry {", New: "if atBound && a.m.p.cfg.Policy == Retry && false {"},
	{Name: "ovfl-record-memory-error", Focus: "TestAggregatorOvflExceeding", Rule: "ovfl reports used-up record memory as ErrFull",
		File: "riutils/aggregator.go", Pkg: "./riutils",
		Old: "if errors.Is(err, alloc.ErrBusy) {\n\t\treturn alloc.Memory{}, true,", New: "if false && errors.Is(err, alloc.ErrBusy) {\n\t\treturn alloc.Memory{}, true,"},
	{Name: "ovfl-batch-released-early", Focus: "TestAggregatorOvflExceeding", Rule: "a kept batch's memory is not reused before the batch is sent",
		File: "riutils/aggregator.go", Pkg: "./riutils",
		Old: "\trec, _ := d.batch.Slice(0, a.sealBatch(d))\n", New: "\trec, _ := d.batch.Slice(0, a.sealBatch(d))\n\td.batch.Done()\n"},
	{Name: "ovfl-fast-path-passes-kept", Focus: "TestAggregatorOvflRetryWaitsAtBound", Rule: "an ovfl call goes straight through only when nothing is kept (order)",
		File: "riutils/aggregator.go", Pkg: "./riutils",
		Old: "if d.queued == 0 && a.m.keeper == nil {", New: "if a.m.keeper == nil {"},
	{Name: "ovfl-kept-unbatched", Focus: "TestAggregatorOvflBatchesKeptCalls", Rule: "ovfl batches the calls it keeps",
		File: "riutils/aggregator.go", Pkg: "./riutils",
		Old: "\tif in > a.cfg.FlushSize {\n\t\tn := recordSize", New: "\tif in > 0 {\n\t\tn := recordSize"},
	{Name: "inbox-entry-without-chunks", Focus: "TestDiscoveryWaitsForChunks", Rule: "a receiving thread starts a messenger only on an inbox entry with chunks",
		File: "riutils/recv.go", Pkg: "./riutils",
		Old: "start := !in.taken && len(in.batches) > 0", New: "start := !in.taken"},
	{Name: "riutils-callreturn-dead", Focus: "TestCallReturnCalleeKilled", Rule: "CallReturn fails when the callee's process dies",
		File: "riutils/remote.go", Pkg: "./riutils",
		Old: "\t\tif _, err := m.f.Transmitter(m.f.Names().Rank(dst)); err != nil {\n\t\t\treturn nil, err // the callee died", New: "\t\tif _, err := m.f.Transmitter(m.f.Names().Rank(dst)); false && err != nil {\n\t\t\treturn nil, err // the callee died"},
	{Name: "dsfabric-callreturn-dead", Focus: "TestCallReturnCalleeKilled", Rule: "a death fails the calls waiting on that rank",
		File: "dsfabric/fabric.go", Pkg: "./dsfabric",
		Old: "\t\tif p.rank == r {\n\t\t\tif _, ok := f.pending.LoadAndDelete(id); ok {", New: "\t\tif false && p.rank == r {\n\t\t\tif _, ok := f.pending.LoadAndDelete(id); ok {"},
	{Name: "rdmo-secret", Focus: "TestSection3_1_Failures", Rule: "an RDMO runs only with its capability's secret",
		File: "rdmo/engine.go", Pkg: "./rdmo",
		Old: "if !ok || in.revoked.Load() || e.closed.Load() || !sameSecret(in.secret, r.secret) {", New: "if !ok || in.revoked.Load() || e.closed.Load() || false && !sameSecret(in.secret, r.secret) {"},
	{Name: "rdmo-revoke", Focus: "TestSection3_1_Failures", Rule: "a revoked capability is refused",
		File: "rdmo/engine.go", Pkg: "./rdmo",
		Old: "|| in.revoked.Swap(true) {\n\t\treturn fmt.Errorf(\"%w: revoke of capability %d\", ErrBadCapability, c.ID)\n\t}\n\te.inst.Delete(c.ID)\n\te.mu.Lock()\n\te.valid.give(in.valid)\n",
		New: "{\n\t\treturn fmt.Errorf(\"%w: revoke of capability %d\", ErrBadCapability, c.ID)\n\t}\n\te.mu.Lock()\n"},
	{Name: "shm-call-reclaim", Focus: "TestCallReclaimsDeadCallers", Rule: "call slots of callers that died are taken back",
		File: "dtutils/call.go", Pkg: "./dtutils",
		Old: "if s.state().CompareAndSwap(slotDone, slotFree) {", New: "if false && s.state().CompareAndSwap(slotDone, slotFree) {"},
	{Name: "tcp-close-waits-drain", Focus: "TestTCPCloseWaitsForApply", Rule: "a closed queue pair writes no memory after Close returns",
		File: "dtutils/tcp.go", Pkg: "./dtutils",
		Old: "	q.rx.mu.Lock()\n	if q.rx.err == nil {\n		q.rx.err = fmt.Errorf(\"%w: queue pair closed\", ErrClosed)\n	}\n	q.rx.mu.Unlock()", New: ""},
	{Name: "close-fences-senders", Focus: "TestCloseFencesSenders", Rule: "Close unmaps no send buffer a call is still filling",
		File: "dsfabric/fabric.go", Pkg: "./dsfabric",
		Old: "	f.fenceSenders()\n", New: "\n"},
	{Name: "ofi-rma-fence", Focus: "TestOFIOneSidedKeepsOrder", Rule: "an fi_write or fi_read waits until the frames before it are applied", Tags: "ofi",
		File: "dtutils/ofi_rma.go", Pkg: "./dtutils",
		Old: "		if q.framesSince > 0 {", New: "		if false {"},
	{Name: "ofi-rma-seal-last", Focus: "TestOFICrossProcess|TestOFIOneSidedIsOneSided", Rule: "a one-sided write's last word lands after the rest", Tags: "ofi",
		File: "dtutils/ofi_rma.go", Pkg: "./dtutils",
		Old: "	if wr.Op == OpWrite && len(b) > 8 && (l.Offset+l.Length)%8 == 0 {", New: "	if false {"},
	{Name: "ofi-rma-key-check", Focus: "TestOFIOneSidedIsOneSided|TestTransportSuite", Rule: "the initiator refuses a locator whose key the peer did not confirm", Tags: "ofi",
		File: "dtutils/ofi_rma.go", Pkg: "./dtutils",
		Old: "	if !ok || l.Key != rr.key || ", New: "	if !ok || "},
	{Name: "mcts-spread-placement", Focus: "TestDistributed", Rule: "a node deeper than SpreadDepth lives in its parent's process",
		File: "mcts/distributed.go", Pkg: "./mcts",
		Old: "	if s := d.cfg.SpreadDepth; s > 0 && depth > uint32(s) {", New: "	if s := d.cfg.SpreadDepth; s > 0 && depth > uint32(s) && false {"},
	{Name: "mcts-backprop-perspective", Focus: "TestDistributed", Rule: "results climb the tree as the wins of the player to move at each node",
		File: "mcts/distributed.go", Pkg: "./mcts",
		Old: "	n.upWins += cnt - wins\n", New: "	n.upWins += wins\n"},
	{Name: "mcts-steal-gives", Focus: "TestDistributed", Rule: "an idle process gets leaves from one with leaves queued (work stealing)",
		File: "mcts/distributed.go", Pkg: "./mcts",
		Old: "	give := (queued + 1) / 2\n", New: "	give := 0\n"},
	{Name: "mcts-descend-batch", Focus: "TestDistributed", Rule: "rollouts that select one child under one hold of a node's lock all go on to it",
		File: "mcts/distributed.go", Pkg: "./mcts",
		Old: "\t\t\tp.count++\n", New: ""},
	{Name: "mcts-start-batch", Focus: "TestDistributed", Rule: "every rollout started at the root descends from it",
		File: "mcts/distributed.go", Pkg: "./mcts",
		Old: "descendCall(p.epoch, p.root.idx, uint32(k))", New: "descendCall(p.epoch, p.root.idx, 1)"},
	{Name: "mcts-search-cancel", Focus: "TestSearchCancel", Rule: "a Search whose context ends gives its phase up at once",
		File: "mcts/distributed.go", Pkg: "./mcts",
		Old: "\t\tif p.abandoned.Load() {", New: "\t\tif false && p.abandoned.Load() {"},
	{Name: "mcts-lock-exclusion", Focus: "TestSpinMutex", Rule: "one holder at a time of a node's or a queue's lock",
		File: "mcts/lock.go", Pkg: "./mcts",
		Old: "return m.state.Load() == 0 && m.state.CompareAndSwap(0, 1)", New: "m.state.Store(1); return true"},
	{Name: "msg-recycled-clear", Focus: "TestShutdownReturnsChunks", Rule: "a recycled messenger chunk is cleared before it serves a new sender",
		File: "riutils/messenger.go", Pkg: "./riutils",
		Old: "\t\tif i < recycled {", New: "\t\tif false && i < recycled {"},
	{Name: "mcts-arena-epoch", Focus: "TestArenaLockFreeLookups", Rule: "a lookup of a finished phase finds no node (lock-free arena)",
		File: "mcts/arena.go", Pkg: "./mcts",
		Old: "	if g.epoch != e { // a stale call: its phase is over\n", New: "	if false {\n"},
	{Name: "send-credit-limit", Focus: "TestSection3_2_SendCredits", Rule: "a sender never has more messages unconsumed than its credits",
		File: "dsfabric/calls.go", Pkg: "./dsfabric",
		Old: "		if p.sent-c < limit {", New: "		if p.sent-c <= limit {"},
	{Name: "send-credit-count", Focus: "TestSection3_2_SendCredits", Rule: "a receive buffer is credited to the rank that used it",
		File: "dsfabric/recv.go", Pkg: "./dsfabric",
		Old: "				p := f.peers[src]\n", New: "				p := f.peers[(src+1)%len(f.peers)]\n"},
	{Name: "route-round-unbounded", Focus: "TestSection3_2_RoutingRoundBounded", Rule: "a routing round ends after about one receive buffer per rank, however fast credits come back",
		File: "dsfabric/recv.go", Pkg: "./dsfabric",
		Old: "	for total < limit {\n", New: "	for _ = limit; ; {\n"},
	{Name: "poll-one-lap", Focus: "TestPollOneLap", Rule: "one Poll finishes at most one lap of a messenger's chunks, however fast the sender refills them",
		File: "riutils/recv.go", Pkg: "./riutils",
		Old: "if finished++; finished >= len(r.chunks) {", New: "if finished++; finished < 0 {"},
	{Name: "ring-claim-run-check", Focus: "TestRingClaimSomeHammer", Rule: "a run of ring cells is claimed only where every cell is full",
		File: "dtutils/ring.go", Pkg: "./dtutils",
		Old: "for k < max && r.seq(pos+uint64(k)).Load() == pos+uint64(k)+1 {", New: "for k < max && (k > 0 || r.seq(pos+uint64(k)).Load() == pos+uint64(k)+1) {"},
	{Name: "ring-corrupt-cell", Focus: "TestRingCorruptCellNoSpin", Rule: "a ring cell a lap ahead with the position unmoved is not spun on",
		File: "dtutils/ring.go", Pkg: "./dtutils",
		Old: "			if r.deqPos().Load() == pos {\n				return pos, 0\n			}", New: "			if false {\n				return pos, 0\n			}"},
	{Name: "poll-in-handler-routes-only", Focus: "TestPollInHandler", Rule: "a handler's Poll of its own worker runs none of the calls behind it",
		File: "dsfabric/worker.go", Pkg: "./dsfabric",
		Old: "	if w.inPoll {\n", New: "	if false && w.inPoll {\n"},
	{Name: "service-routes-for-stuck-workers", Focus: "TestSection3_2_CallsInHandlers", Rule: "the service thread routes while no worker polls",
		File: "dsfabric/recv.go", Pkg: "./dsfabric",
		Old: "		n := f.routeLocked()", New: "		n := 0"},
	{Name: "sr-source-check", Focus: "TestSRForgedSource", Rule: "an SR buffer is counted only for the connection it came on",
		File: "shuffle/sr.go", Pkg: "./shuffle",
		Old: "r.srcs[src].qp == nil || r.srcs[src].peer != c.Src ||", New: "r.srcs[src].qp == nil ||"},
	{Name: "sr-last-credits", Focus: "TestSRLastCredits", Rule: "a release after the source's end credits at once",
		File: "shuffle/sr.go", Pkg: "./shuffle",
		Old: "s.consumed-s.creditSent >= uint64(max(1, s.window/4)) || s.ended {", New: "s.consumed-s.creditSent >= uint64(max(1, s.window/4)) || in.Depleted {"},
	{Name: "shuffle-close-handshake", Focus: "TestMeshCloseWaitsForPeers", Rule: "a process closes shuffle connections only after its peers closed their endpoints",
		File: "shuffle/fabric.go", Pkg: "./shuffle",
		Old: "		errs = append(errs, m.set.closing(ctx))", New: ""},
	{Name: "shuffle-bad-record-ends-stream", Focus: "TestMalformedRecords", Rule: "a record that does not parse is an error, not the end of the stream",
		File: "shuffle/ops.go", Pkg: "./shuffle",
		Old: "err := badRecord(rc.rest)", New: "err := io.EOF"},
	{Name: "close-ignores-holds", Focus: "TestHoldKeepsMemoryMapped", Rule: "a process's memory stays mapped while an endpoint holds it",
		File: "dtutils/process.go", Pkg: "./dtutils",
		Old: "	if p.holds == 0 {\n		return false", New: "	if true {\n		return false"},
	{Name: "shuffle-closed-process", Focus: "TestProcessClosedUnderEndpoints", Rule: "an endpoint whose process closed refuses calls instead of using its memory",
		File: "shuffle/endpoint.go", Pkg: "./shuffle",
		Old: "	if proc.Closed() {", New: "	if false {"},
	{Name: "riutils-closed-fabric", Focus: "TestUseAfterFabricClose", Rule: "messengers kept past their fabric's Close refuse calls instead of touching its memory",
		File: "riutils/send.go", Pkg: "./riutils",
		Old: "	if m.proc.Closed() {\n		// Its memory", New: "	if false {\n		// Its memory"},
	{Name: "rdmo-client-closed-process", Focus: "TestClientProcessClosed", Rule: "a client whose process closed refuses RDMOs instead of writing into its unmapped slots",
		File: "rdmo/client.go", Pkg: "./rdmo",
		Old: "	if c.proc.Closed() {\n		return nil, nil,", New: "	if false {\n		return nil, nil,"},
	{Name: "dsfabric-barrier-after-close", Focus: "TestUseAfterClose", Rule: "a fabric refuses a barrier after Close instead of waiting for ranks that left",
		File: "dsfabric/fabric.go", Pkg: "./dsfabric",
		Old: "	if f.closing.Load() {\n		// Close's own barrier", New: "	if false {\n		// Close's own barrier"},
	{Name: "dropped-owner-holds", Focus: "TestDroppedEndpointsReleaseMemory", Rule: "an endpoint dropped without Close gives its process's memory back when collected",
		File: "dtutils/process.go", Pkg: "./shuffle",
		Old: "	runtime.AddCleanup(owner, func(release func()) { release() }, release)", New: ""},
	{Name: "riutils-poller-outlives-fabric", Focus: "TestPollerOutlivesFabric", Rule: "a Poller's Serve stops when its fabric closes",
		File: "riutils/poller.go", Pkg: "./riutils",
		Old: "	for ctx.Err() == nil && !pl.proc.Closed() {", New: "	for ctx.Err() == nil {"},
	{Name: "adaptive-grow", Focus: "TestSection6_AdaptiveWindow", Rule: "an adaptive window grows when it starved a consumer",
		File: "shuffle/endpoint.go", Pkg: "./shuffle",
		Old: "s.window = min(r.cfg.Depth, 2*s.window)", New: "s.window = min(r.cfg.Depth, s.window)"},
	{Name: "adaptive-floor", Focus: "TestSection6_AdaptiveFloor", Rule: "an adaptive window never shrinks back to a size that starved its consumer",
		File: "shuffle/endpoint.go", Pkg: "./shuffle",
		Old: "w := max(1, s.floor, s.window-(s.minSpare-1))", New: "w := max(1, s.window-(s.minSpare-1))"},
	{Name: "ring-dequeue-soon", Focus: "TestRingDequeueSoon", Rule: "an enqueue under way does not make a ring look empty",
		File: "dtutils/ring.go", Pkg: "./dtutils",
		Old: "for end := time.Now().Add(d); int64(r.enqPos().Load()-r.deqPos().Load()) > 0; {", New: "for end := time.Now().Add(d); false; {"},
	{Name: "ring-enqueue-vacating", Focus: "TestRingEnqueueWaitsForVacatingCell", Rule: "a cell being vacated by a dequeue does not make a ring full",
		File: "dtutils/ring.go", Pkg: "./dtutils",
		Old: "if int64(pos-r.deqPos().Load()) >= int64(r.capacity) {", New: "if true {"},
	{Name: "send-claim", Focus: "TestTransportSuite", Rule: "a send claims one of the receives posted, or is refused",
		File: "dtutils/process.go", Pkg: "./dtutils",
		Old: "\t\t\tif c >= r {\n\t\t\t\treturn false\n", New: "\t\t\tif false && c >= r {\n\t\t\t\treturn false\n"},
	{Name: "inline-min-len", Focus: "TestTransportSuite", Rule: "a send goes inline only if every receive ever posted holds it",
		File: "dtutils/apply.go", Pkg: "./dtutils",
		Old: "len(in) <= recvInlineMax && uint64(len(in)) <= rs.cnt.minLen.Load()", New: "len(in) <= recvInlineMax"},
	{Name: "inplace-repost", Focus: "TestTransportSuite/.*/SendInPlace", Rule: "a send delivered in place leaves its claimed receive posted",
		File: "dtutils/process.go", Pkg: "./dtutils",
		Old: "\t\tq.proc.cnt.ready.Add(kept)\n", New: "\n"},
	{Name: "rdmo-direct-revoke", Focus: "TestSection3_1_Direct", Rule: "a client running a method itself refuses a revoked capability",
		File: "rdmo/direct.go", Pkg: "./rdmo",
		Old: "if m.valid.Load() != m.id {", New: "if false && m.valid.Load() != m.id {"},
	{Name: "rdmo-direct-lost", Focus: "TestDirectTargetLost", Rule: "a client running a method itself stops once the target is gone",
		File: "rdmo/direct.go", Pkg: "./rdmo",
		Old: "if err := m.mem.Err(); err != nil {", New: "if err := m.mem.Err(); false && err != nil {"},
	{Name: "call-queue-bound", Focus: "TestCall", Rule: "at most CallSlots calls run at once; more are refused",
		File: "dtutils/call.go", Pkg: "./dtutils",
		Old: "if p.running.Add(1) > int64(p.cfg.CallSlots) {", New: "if p.running.Add(1) > int64(p.cfg.CallSlots)+1000 {"},
	{Name: "shm-call-slot-return", Focus: "TestCall|TestCallConcurrent", Rule: "a caller returns its call slot once answered",
		File: "dtutils/call.go", Pkg: "./dtutils",
		Old: "\ts.state().Store(slotFree)\n\tc.free.enqueue(e[:])\n", New: "\ts.state().Store(slotFree)\n"},
	{Name: "alloc-tag-completion", Focus: "TestCircular|TestLinear", Rule: "a unit tagged with operation f is reused only once the tracker has completed f",
		File: "alloc/memory.go", Pkg: "./alloc",
		Old: "if e.t.Completed() <= e.seq {", New: "if e.t.Completed() < e.seq {"},
	{Name: "alloc-tag-keeps-latest", Focus: "TestUnitWaitsForItsLatestTag", Rule: "a unit's tag for a tracker is the latest operation that used it",
		File: "alloc/memory.go", Pkg: "./alloc",
		Old: "\t\t\tif seq > u.tags[i].seq {\n", New: "\t\t\tif true {\n"},
	{Name: "alloc-settle-once", Focus: "TestCircular|TestLinear", Rule: "a handout settled twice counts once",
		File: "alloc/memory.go", Pkg: "./alloc",
		Old: "if int(w) < len(u.done) && u.done[w]&b == 0 {", New: "if int(w) < len(u.done) {"},
	{Name: "alloc-grow-at-cursor", Focus: "TestCircular|TestLinear", Rule: "a ring grows at its cursor, so the next unit handed out is a fresh one",
		File: "alloc/circular.go", Pkg: "./alloc",
		Old: "\tring = append(ring, c.ring[:c.cur]...)\n\tring = append(ring, fresh...)\n\tc.ring = append(ring, c.ring[c.cur:]...)\n", New: "\tring = append(ring, c.ring...)\n\tc.ring = append(ring, fresh...)\n"},
	{Name: "alloc-linear-align", Focus: "TestLinearCircularSegments", Rule: "linear-circular segments start aligned",
		File: "alloc/circular.go", Pkg: "./alloc",
		Old: "l.fill += (n + a - 1) &^ (a - 1)", New: "l.fill += n + 0*a"},
	{Name: "alloc-linear-fit", Focus: "TestLinear", Rule: "a linear-circular segment lies inside one unit",
		File: "alloc/circular.go", Pkg: "./alloc",
		Old: "if l.u == nil || l.fill+n > l.c.cfg.UnitSize {", New: "if l.u == nil || l.fill > l.c.cfg.UnitSize {"},
	{Name: "alloc-slice-slot", Focus: "TestLinear|TestMemory", Rule: "a slice of a segment settles that segment",
		File: "alloc/memory.go", Pkg: "./alloc",
		Old: "\t\ts.n |= m.n &^ lenMask // the slot\n", New: ""},
	{Name: "alloc-reset-handouts", Focus: "TestUnitRecyclesIndefinitely", Rule: "a reused unit numbers its handouts from zero",
		File: "alloc/memory.go", Pkg: "./alloc",
		Old: "\tu.handouts = 0\n", New: ""},
	{Name: "rconn-record-bounds", Focus: "TestRecordBeyondRing", Rule: "an rconn record the peer wrote stays inside the ring",
		File: "rconn/conn.go", Pkg: "./rconn",
		Old: "if n == 0 || off+rec > c.rx.size || rec > c.rx.size/4 {", New: "if n == 0 {"},
	{Name: "rconn-partial-read", Focus: "TestStreamBothWays", Rule: "a short Read consumes what it returned, no more and no less",
		File: "rconn/conn.go", Pkg: "./rconn",
		Old: "\tc.cur += uint64(n)\n", New: ""},
	{Name: "rconn-writer-wake", Focus: "TestSleepersAreRung", Rule: "a reader freeing room wakes a writer asleep for it",
		File: "rconn/conn.go", Pkg: "./rconn",
		Old: "\tif c.rx.u32(offWSleep).Load() != 0 {\n\t\tringBell(c.peerW)\n\t}\n", New: ""},
	{Name: "rconn-reader-wake", Focus: "TestSleepersAreRung", Rule: "a writer wakes a reader asleep for data",
		File: "rconn/conn.go", Pkg: "./rconn",
		Old: "\t\tif c.tx.u32(offRSleep).Load() != 0 {\n\t\t\tringBell(c.peerR)\n\t\t}\n", New: ""},
	{Name: "rconn-wrap-room", Focus: "TestWrapWaitsForTheLapBefore", Rule: "a writer wraps only into room the reader freed",
		File: "rconn/conn.go", Pkg: "./rconn",
		Old: "\t\t\tif err := c.room(c.tx.size - off); err != nil {\n\t\t\t\treturn done, err\n\t\t\t}\n", New: ""},
	{Name: "rdmo-budget", Focus: "TestSection3_1_Failures", Rule: "a method stops when its cost budget is spent",
		File: "rdmo/ctx.go", Pkg: "./rdmo",
		Old: "\tif x.left < 0 {\n", New: "\tif false {\n"},
	{Name: "rdmo-max-input", Focus: "TestSection3_1_Failures", Rule: "an RDMO's input is bounded by its method's MaxInput",
		File: "rdmo/engine.go", Pkg: "./rdmo",
		Old: "if len(input) > m.MaxInput {", New: "if false {"},
	{Name: "rdmo-max-output", Focus: "TestSection3_1_Failures", Rule: "an RDMO's output is bounded by its method's MaxOutput",
		File: "rdmo/engine.go", Pkg: "./rdmo",
		Old: "\t\tout = out[:m.MaxOutput]\n", New: ""},
	{Name: "rdmo-method-range", Focus: "TestSection3_1_Failures", Rule: "a method number past the type's methods is refused",
		File: "rdmo/engine.go", Pkg: "./rdmo",
		Old: "if int(method) >= len(t.Methods) {", New: "if int(method) > len(t.Methods) {"},
	{Name: "rdmo-result-bounds", Focus: "TestSection3_1_Failures", Rule: "a method reporting more output than it had room for faults",
		File: "rdmo/engine.go", Pkg: "./rdmo",
		Old: "if n < 0 || n > len(out) || (code != OK && code < CodeUser) {", New: "if n < 0 || (code != OK && code < CodeUser) {"},
	{Name: "dsfabric-call-body-length", Focus: "FuzzCallMessage", Rule: "a call's body is exactly its arguments and buffer",
		File: "dsfabric/wire.go", Pkg: "./dsfabric",
		Old: "if uint64(h.args)+uint64(h.buf) != uint64(len(rest)) {", New: "if uint64(h.args)+uint64(h.buf) > uint64(len(rest)) {"},
	{Name: "dsfabric-rank-range", Focus: "FuzzCoordinatorMessages", Rule: "a rank in a bootstrap message is inside the job",
		File: "dsfabric/wire.go", Pkg: "./dsfabric",
		Old: "if r.err == nil && int(v) >= size {\n\t\t\treturn nil, fmt.Errorf(\"%w: rank %d in a job of %d\"", New: "if r.err == nil && int(v) > size {\n\t\t\treturn nil, fmt.Errorf(\"%w: rank %d in a job of %d\""},
	{Name: "dsfabric-endpoint-range", Focus: "FuzzCoordinatorMessages", Rule: "an endpoint in a bootstrap message belongs to a rank inside the job",
		File: "dsfabric/wire.go", Pkg: "./dsfabric",
		Old: "if r.err == nil && int(e.peer) >= size {", New: "if r.err == nil && int(e.peer) > size {"},
	{Name: "riutils-record-args", Focus: "TestRecord|FuzzRecordParse", Rule: "a record's argument bytes fit in its payload",
		File: "riutils/wire.go", Pkg: "./riutils",
		Old: "\tif na > n {\n", New: "\tif false {\n"},
	{Name: "mcts-decode-length", Focus: "TestWireRoundTrip", Rule: "a search call has exactly its kind's words",
		File: "mcts/wire.go", Pkg: "./mcts",
		Old: "if len(args) != 4*kindWords[kind] {", New: "if len(args) < 4*kindWords[kind] {"},
	{Name: "shuffle-record-bounds", Focus: "TestMalformedRecords", Rule: "a shuffle record lies inside its buffer",
		File: "shuffle/wire.go", Pkg: "./shuffle",
		Old: "if r := b[recordHeader:]; n <= uint64(len(r)) {", New: "if r := b[recordHeader:]; n <= uint64(cap(r)) {"},
	{Name: "shuffle-refs-in-flight", Focus: "TestSection5_RDBufferHeldUntilConsumed", Rule: "a buffer sent is not reused until every destination consumed it",
		File: "shuffle/endpoint.go", Pkg: "./shuffle",
		Old: "\tc.held = append(c.held, held{seq: seq, buf: b.idx})\n\ts.refs[b.idx]++\n", New: "\tc.held = append(c.held, held{seq: seq, buf: b.idx})\n"},
	{Name: "shuffle-round-robin", Focus: "TestSection4_2_ReceiverTakesInTurn", Rule: "a receiver takes from its sources in turn",
		File: "shuffle/endpoint.go", Pkg: "./shuffle",
		Old: "\t\tr.rr = (i + 1) % n\n", New: "\t\tr.rr = i\n"},
	{Name: "shuffle-release-in-order", Focus: "TestWiring", Rule: "credit counts only buffers released in sequence",
		File: "shuffle/endpoint.go", Pkg: "./shuffle",
		Old: "for s.consumed+1 < s.next && s.released[s.consumed%uint64(r.cfg.Depth)] {", New: "for s.consumed+1 < s.next {"},
	{Name: "shuffle-release-twice", Focus: "TestSection4_2_ReceiverTakesInTurn", Rule: "a buffer released twice is an error",
		File: "shuffle/endpoint.go", Pkg: "./shuffle",
		Old: "if in.seq <= s.consumed || in.seq >= s.next || s.released[slot] {", New: "if in.seq >= s.next {"},
	{Name: "fifo-grow-order", Focus: "TestCall", Rule: "a growing FIFO keeps its elements' order",
		File: "dtutils/fifo.go", Pkg: "./dtutils",
		Old: "nb[i] = f.buf[(f.head+i)%len(f.buf)]", New: "nb[i] = f.buf[i]"},
	{Name: "general-merge-next", Focus: "TestGeneralFreeAndReuse", Rule: "a freed block merges with the free blocks on both sides",
		File: "alloc/general.go", Pkg: "./alloc",
		Old: "\t\tif i < len(c.free) && e.off+e.n == c.free[i].off {\n\t\t\tc.free[i-1].n += c.free[i].n\n", New: "\t\tif false {\n\t\t\tc.free[i-1].n += c.free[i].n\n"},
	{Name: "general-best-fit", Focus: "TestGeneralFreeAndReuse", Rule: "best fit carves the smallest free block that holds the request",
		File: "alloc/general.go", Pkg: "./alloc",
		Old: "if bc < 0 || e.n < bn {", New: "if bc < 0 || e.n > bn {"},
	{Name: "general-double-free", Focus: "TestGeneralFreeAndReuse", Rule: "a block freed twice is refused",
		File: "alloc/general.go", Pkg: "./alloc",
		Old: "\t\tdelete(g.used, k)\n", New: ""},
	{Name: "cpulist-reversed", Focus: "TestParseCPUList", Rule: "a reversed CPU range is an error",
		File: "numa/cpulist.go", Pkg: "./numa",
		Old: "\t\t\tif b < a {\n", New: "\t\t\tif false {\n"},
	{Name: "cpulist-dedupe", Focus: "TestParseCPUList", Rule: "a CPU listed twice is one CPU",
		File: "numa/cpulist.go", Pkg: "./numa",
		Old: "if i == 0 || c != cpus[i-1] {", New: "if i >= 0 {"},
	{Name: "tcp-frame-reserved", Focus: "TestTCPMalformedFramesFromPeer", Rule: "a frame with reserved bits set is refused",
		File: "dtutils/wire.go", Pkg: "./dtutils",
		Old: "if b[3] != 0 || f.flags&^flagSignaled != 0 || f.status >= numStatus {", New: "if f.status >= numStatus {"},
	{Name: "tcp-frame-payload-max", Focus: "TestTCPMalformedFramesFromPeer", Rule: "a frame's payload is bounded before it is read",
		File: "dtutils/wire.go", Pkg: "./dtutils",
		Old: "if int64(f.payload) > int64(maxPayload) {", New: "if false {"},
	{Name: "tcp-call-reply-max", Focus: "TestTCPMalformedFramesFromPeer", Rule: "a call's reply capacity is bounded",
		File: "dtutils/wire.go", Pkg: "./dtutils",
		Old: "\t\tif f.length > uint64(maxPayload) {\n", New: "\t\tif false {\n"},
	{Name: "riutils-alloc-reply-check", Focus: "FuzzAllocMessages", Rule: "a chunk granted by the receiver is a whole chunk of the receiver's memory",
		File: "riutils/wire.go", Pkg: "./riutils",
		Old: "if locs[i].Length != uint64(size) || locs[i].Process != rank {", New: "if locs[i].Length == 0 && false {"},
	{Name: "riutils-reserve-fit", Focus: "TestMessengerSequence", Rule: "a record goes in the current chunk only if it fits there",
		File: "riutils/send.go", Pkg: "./riutils",
		Old: "if s.pos+size <= s.m.p.cfg.ChunkSize {", New: "if s.pos < s.m.p.cfg.ChunkSize {"},
	{Name: "riutils-rotate-grow-bit", Focus: "TestGrowthInTheMiddle", Rule: "a rotation after growth tells the receiver where the new chunks go",
		File: "riutils/send.go", Pkg: "./riutils",
		Old: "\t\tpw |= prodGrow\n", New: ""},
	{Name: "riutils-rotate-end", Focus: "TestMessengerSequence", Rule: "a rotation tells the receiver where the chunk's records end",
		File: "riutils/send.go", Pkg: "./riutils",
		Old: "pw := uint64(s.pos) | prodRotate", New: "pw := uint64(recordsStart) | prodRotate"},
	{Name: "riutils-call-size", Focus: "TestMessengerSequence", Rule: "a call no chunk can hold is refused at once",
		File: "riutils/send.go", Pkg: "./riutils",
		Old: "if n > m.p.cfg.MaxPayload() {", New: "if n > m.p.cfg.MaxPayload()+8 {"},
	{Name: "dsfabric-route-thread-range", Focus: "TestMisuse", Rule: "a call to a thread of another rank is refused, not routed",
		File: "dsfabric/recv.go", Pkg: "./dsfabric",
		Old: "return t, t >= 0 && t < f.names.ThreadsPerProcess", New: "return t, t >= 0 && t <= f.names.ThreadsPerProcess"},
	{Name: "dsfabric-credit-word-owner", Focus: "TestCredit|TestSecurity", Rule: "credits are written only into the memory of the rank that asked for them",
		File: "dsfabric/recv.go", Pkg: "./dsfabric",
		Old: "case at.Process != uint32(src) || at.Length != 8 || at.Offset%8 != 0:", New: "case at.Length != 8 || at.Offset%8 != 0:"},
	{Name: "dsfabric-handler-collision", Focus: "TestHandler|TestRegister", Rule: "a handler ID already registered is refused",
		File: "dsfabric/handlers.go", Pkg: "./dsfabric",
		Old: "if old, ok := h.names[id]; ok {", New: "if old, ok := h.names[id]; ok && false {"},
	{Name: "transmitter-own-status", Focus: "TestTransmitterFailure", Rule: "a signaled operation that failed returns its failure",
		File: "dtutils/transmitter.go", Pkg: "./dtutils",
		Old: "if st := Status(v & 0xff); st != StatusSuccess {", New: "if st := Status(v & 0xff); false && st != StatusSuccess {"},
	{Name: "transmitter-sticky-failure", Focus: "TestTransmitterFailure", Rule: "an unsignaled operation's failure fails the Transmitter's later calls",
		File: "dtutils/transmitter.go", Pkg: "./dtutils",
		Old: "t.failed.CompareAndSwap(nil, &err)", New: "_ = err"},
	{Name: "mcts-virtual-visits", Focus: "TestDistributed", Rule: "a selection charges the child its playouts at once (virtual visits), so concurrent rollouts spread out",
		File: "mcts/node.go", Pkg: "./mcts",
		Old: "\tn.slots[i].visits += playouts\n\tn.slots[i].refresh()\n\tn.visits += playouts\n\treturn i, expand\n", New: "\tn.slots[i].refresh()\n\tn.visits += playouts\n\treturn i, expand\n"},
	{Name: "mcts-untried-once", Focus: "ExampleSequential", Rule: "each move of a node is expanded once",
		File: "mcts/node.go", Pkg: "./mcts",
		Old: "\t\tn.untried[j] = n.untried[k-1]\n", New: ""},
	{Name: "mcts-most-visited", Focus: "ExampleSequential", Rule: "the move played is the most visited child",
		File: "mcts/node.go", Pkg: "./mcts",
		Old: "if best < 0 || n.slots[i].visits > n.slots[best].visits {", New: "if best < 0 || n.slots[i].visits < n.slots[best].visits {"},
	{Name: "sr-credit-source", Focus: "TestSRForgedCredit", Rule: "an SR credit counts only when it comes from the destination it names",
		File: "shuffle/sr.go", Pkg: "./shuffle",
		Old: " && s.conns[d].peer == c.Src {", New: " {"},
	{Name: "tcp-wrong-process", Focus: "TestTransmitterWriteChecksEveryAccess", Rule: "a one-sided operation naming another process than the peer fails without reaching it",
		File: "dtutils/tcp.go", Pkg: "./dtutils",
		Old: "if oneSided && wr.Remote.Process != q.peerRank {", New: "if false && oneSided && wr.Remote.Process != q.peerRank {"},
	{Name: "tcp-unsignaled-failure", Focus: "TestTransmitterWriteChecksEveryAccess", Rule: "an unsignaled operation that fails at the peer is reported",
		File: "dtutils/tcp.go", Pkg: "./dtutils",
		Old: "if !needsResponse(Op(f.op), f.flags&flagSignaled != 0) && st == StatusSuccess {", New: "if !needsResponse(Op(f.op), f.flags&flagSignaled != 0) {"},
	{Name: "tcp-response-match", Focus: "TestTCPMalformedFramesFromPeer", Rule: "a response must answer the oldest pending operation",
		File: "dtutils/tcp.go", Pkg: "./dtutils",
		Old: "if !ok || p.wrid != f.wrid || p.op != op {", New: "if !ok {"},
	{Name: "tcp-read-response-length", Focus: "TestTCPMalformedFramesFromPeer", Rule: "a read response carries exactly the bytes asked for",
		File: "dtutils/tcp.go", Pkg: "./dtutils",
		Old: "if dst := p.local.Bytes(); len(dst) != int(f.payload) {", New: "if dst := p.local.Bytes(); false {"},
	{Name: "tcp-fail-completes-pending", Focus: "TestTransportSuite", Rule: "a lost connection completes every pending operation with an error",
		File: "dtutils/tcp.go", Pkg: "./dtutils",
		Old: "\t\tif !p.internal {\n\t\t\tq.cq.push(Completion{WRID: p.wrid, Op: p.op, Status: StatusConnectionLost})\n\t\t}", New: "\t\t_ = p"},
	{Name: "tcp-read-too-long", Focus: "TestTCPMalformedFramesFromPeer", Rule: "a read request longer than MaxTransfer is refused, not applied",
		File: "dtutils/tcp.go", Pkg: "./dtutils",
		Old: "case op == OpRead && uint64(len(out)) != f.length:", New: "case false:"},
	{Name: "shm-watch-death", Focus: "TestMapRemote", Rule: "the end of a peer's watch connection marks the peer gone",
		File: "dtutils/shm.go", Pkg: "./dtutils",
		Old: "\t\tc.Read(b[:])\n\t\tq.peerGone.Store(true)", New: "\t\tc.Read(b[:])"},
	{Name: "shm-queue-layout-check", Focus: "FuzzOpenQueues", Rule: "a peer's completion ring must match its receive queue",
		File: "dtutils/shm.go", Pkg: "./dtutils",
		Old: "if rs.rcq.entry != recvComplSize || rs.rcq.capacity != rs.srq.capacity {", New: "if false {"},
	{Name: "shm-direct-process", Focus: "TestTransmitterWriteChecksEveryAccess", Rule: "a direct shm write names the peer's process",
		File: "dtutils/syncqp.go", Pkg: "./dtutils",
		Old: "remote.Process != sp.r ||", New: ""},
	{Name: "send-now-max-transfer", Focus: "TestTransmitterSendChecksMaxTransfer", Rule: "a send larger than MaxTransfer is refused",
		File: "dtutils/syncqp.go", Pkg: "./dtutils",
		Old: "if pp == nil || q.closed.Load() || q.peerGone.Load() || len(src) > q.proc.cfg.MaxTransfer {", New: "if pp == nil || q.closed.Load() || q.peerGone.Load() {"},
	{Name: "sync-unsignaled-failure", Focus: "TestTransmitterWriteChecksEveryAccess", Rule: "an unsignaled operation that fails completes with its error",
		File: "dtutils/syncqp.go", Pkg: "./dtutils",
		Old: "if wr.Signaled || st != StatusSuccess {", New: "if wr.Signaled {"},
	{Name: "keeper-fifo", Focus: "TestRetryAsyncOrderWhileDraining", Rule: "a call to a destination with kept calls is kept behind them (per-sender FIFO)",
		File: "riutils/keeper.go", Pkg: "./riutils",
		Old: "if q == nil || !q.active {\n\t\tk.mu.Unlock()", New: "if true {\n\t\tk.mu.Unlock()"},
	{Name: "keeper-max-async", Focus: "TestMessengerRetryAsyncKeepsOrder", Rule: "RetryAsync keeps at most MaxAsyncBytes",
		File: "riutils/keeper.go", Pkg: "./riutils",
		Old: "if k.bytes+size > k.m.p.cfg.MaxAsyncBytes {", New: "if false {"},
	{Name: "keeper-bytes-returned", Focus: "TestMessengerRetryAsyncKeepsOrder", Rule: "a kept call sent gives its bytes back to MaxAsyncBytes",
		File: "riutils/keeper.go", Pkg: "./riutils",
		Old: "\t\t\tk.bytes -= len(rec)\n", New: ""},
	{Name: "keeper-error-sticky", Focus: "TestRetryAsyncHelperFailureReported", Rule: "the helper's failure is reported to the thread's next call",
		File: "riutils/keeper.go", Pkg: "./riutils",
		Old: "if err := k.err; err != nil {\n\t\tk.mu.Unlock()\n\t\treturn err", New: "if err := k.err; false && err != nil {\n\t\tk.mu.Unlock()\n\t\treturn err"},
	{Name: "riutils-remote-process", Focus: "TestOneSidedCallVariants", Rule: "a buffer call's destination lies in the callee's process",
		File: "riutils/extend.go", Pkg: "./riutils",
		Old: "if dest.Process != uint32(names.Rank(dst)) || uint64(n) > dest.Length {", New: "if uint64(n) > dest.Length {"},
	{Name: "coord-token", Focus: "TestWrongSecretRejected", Rule: "a hello with the wrong job token is refused",
		File: "dsfabric/coord.go", Pkg: "./dsfabric",
		Old: "case subtle.ConstantTimeCompare(h.token, []byte(l.token)) != 1:", New: "case subtle.ConstantTimeCompare(h.token, []byte(l.token)) != 1 && false:"},
	{Name: "coord-duplicate-rank", Focus: "TestBootstrapRefusesClaims", Rule: "a second hello for a rank that joined is refused",
		File: "dsfabric/coord.go", Pkg: "./dsfabric",
		Old: "if c.conn(int(a.h.rank)) != nil {", New: "if false {"},
	{Name: "coord-rank-zero", Focus: "TestBootstrapRefusesClaims", Rule: "no hello may claim rank 0",
		File: "dsfabric/coord.go", Pkg: "./dsfabric",
		Old: "case h.rank == 0 || int(h.rank) >= size:", New: "case int(h.rank) >= size:"},
	{Name: "coord-plan-mutual", Focus: "TestPlanNeedsBothProbes", Rule: "shm is planned only between ranks that reach each other",
		File: "dsfabric/coord.go", Pkg: "./dsfabric",
		Old: "if p != r && reach[r][p] && reach[p][r] {", New: "if p != r && reach[r][p] {"},
	{Name: "coord-barrier-dead", Focus: "TestCallReturnCalleeKilled", Rule: "a barrier does not wait for dead ranks",
		File: "dsfabric/coord.go", Pkg: "./dsfabric",
		Old: "if !arrived[r] && !c.f.isDead(r) {", New: "if !arrived[r] {"},
	{Name: "coord-bye", Focus: "TestUseAfterClose", Rule: "a rank that said bye and left is not dead",
		File: "dsfabric/coord.go", Pkg: "./dsfabric",
		Old: "\t\t\t\t\tif !bye {\n", New: "\t\t\t\t\tif _ = bye; true {\n"},
	{Name: "rdmo-slotted-data-full", Focus: "TestSection3_3_SlottedAppend", Rule: "SlottedAppend reports a full page when the data area is used up",
		File: "rdmo/builtin.go", Pkg: "./rdmo",
		Old: "if cnt >= n || used+l > d {", New: "if _ = d; cnt >= n {"},
	{Name: "rdmo-slotted-slots-full", Focus: "TestSection3_3_SlottedAppend", Rule: "SlottedAppend reports a full page when every slot is used",
		File: "rdmo/builtin.go", Pkg: "./rdmo",
		Old: "if cnt >= n || used+l > d {", New: "if used+l > d {"},
	{Name: "rdmo-gather-visible", Focus: "TestSection3_3_ConditionalGather", Rule: "a version begun at the timestamp is visible at it",
		File: "rdmo/builtin.go", Pkg: "./rdmo",
		Old: "if begin := x.Load(at + 16); begin <= ts {", New: "if begin := x.Load(at + 16); begin < ts {"},
	{Name: "rdmo-insert-full", Focus: "TestSection3_3_ConditionalGather", Rule: "Insert reports full when no node is left",
		File: "rdmo/builtin.go", Pkg: "./rdmo",
		Old: "\t\t\tif i >= n {\n", New: "\t\t\tif i > n {\n"},
	{Name: "rdmo-read-unlocks", Focus: "TestSection3_3_SignaledRead", Rule: "SignaledRead frees the lock it took",
		File: "rdmo/builtin.go", Pkg: "./rdmo",
		Old: "x.Read(recordHeader, out[:d])\n\t\t\t\t\tx.Store(0, 0)", New: "x.Read(recordHeader, out[:d])"},
	{Name: "rdmo-write-version", Focus: "TestSection3_3_SignaledRead", Rule: "LockedWrite counts every write in the version word",
		File: "rdmo/builtin.go", Pkg: "./rdmo",
		Old: "\t\t\t\t\tx.Add(8, 1)\n", New: ""},
	{Name: "rdmo-accumulate-index", Focus: "TestSection3_3_ScatterAndAccumulate", Rule: "a lookup entry naming no accumulator is refused",
		File: "rdmo/builtin.go", Pkg: "./rdmo",
		Old: "if idx >= a {", New: "if idx > a {"},
	{Name: "hex-solver-tt-hash", Focus: "TestSolverAgreesWithDefinition", Rule: "the solver trusts a table entry only for the same position",
		File: "hex/solve.go", Pkg: "./hex",
		Old: "if e == 0 || e|1 != h|1 {", New: "if e == 0 {"},
	{Name: "hex-solver-top-edge", Focus: "TestSolverAgreesWithDefinition", Rule: "a stone on the first row touches its edge",
		File: "hex/solve.go", Pkg: "./hex",
		Old: "\t\t\ttouchTop = full\n", New: ""},
	{Name: "hex-flood-upward", Focus: "TestFilledBoardOneWinner", Rule: "a stone joins the stone diagonally above-right of it",
		File: "hex/flood.go", Pkg: "./hex",
		Old: "s := (r|r<<1)&full&rows[y] | reach[y]\n\t\t\tif s != reach[y] {\n\t\t\t\treach[y] = expand", New: "s := r&full&rows[y] | reach[y]\n\t\t\tif s != reach[y] {\n\t\t\t\treach[y] = expand"},
	{Name: "htp-byoyomi-period", Focus: "TestHTPByoYomiPeriods", Rule: "a byo-yomi period's last stone starts a new period",
		File: "hex/htp.go", Pkg: "./hex",
		Old: "if c.stones[i]--; c.stones[i] == 0 && c.left[i] > 0 {\n\t\t\tc.left[i], c.stones[i] = c.byoTime, c.byoStones\n\t\t}", New: "c.stones[i]--"},
	{Name: "htp-byoyomi-share", Focus: "TestHTPClock", Rule: "a byo-yomi move gets its period's time over the stones left",
		File: "hex/htp.go", Pkg: "./hex",
		Old: "per = c.left[i] / time.Duration(c.stones[i])", New: "per = c.left[i]"},
	{Name: "rconn-verdict", Focus: "TestHandshakeVerdicts", Rule: "rings are used only when both sides mapped the other's",
		File: "rconn/rconn.go", Pkg: "./rconn",
		Old: "if tx == nil || theirs[0] != 1 {", New: "if tx == nil {"},
	{Name: "rconn-same-machine", Focus: "TestHandshakeVerdicts", Rule: "a peer's ring is mapped only on the same machine",
		File: "rconn/rconn.go", Pkg: "./rconn",
		Old: "peer.machine == mine.machine && mine.machine != \"\"", New: "mine.machine != \"\""},
	{Name: "shuffle-last-user-depletes", Focus: "TestWiring", Rule: "only an endpoint's last Shuffle to close sends Depleted",
		File: "shuffle/endpoint.go", Pkg: "./shuffle",
		Old: "if s.users--; s.users > 0 || s.done {", New: "if s.users--; s.users > 1 || s.done {"},
	{Name: "shuffle-window", Focus: "TestWiring", Rule: "a sender keeps at most a window of buffers in flight per connection",
		File: "shuffle/endpoint.go", Pkg: "./shuffle",
		Old: "if _, limit := c.limit(s.cfg.Depth); c.sent < limit {", New: "if _, limit := c.limit(s.cfg.Depth); c.sent <= limit {"},
	{Name: "shuffle-deplete-waits", Focus: "TestSection5_RDBufferHeldUntilConsumed", Rule: "Close returns only once the receivers consumed every buffer",
		File: "shuffle/endpoint.go", Pkg: "./shuffle",
		Old: "\t\tif !pending {\n", New: "\t\tif _ = pending; true {\n"},
	{Name: "shuffle-record-fits", Focus: "TestPutRecordSize", Rule: "a record that cannot fit a buffer with its header is refused, not dropped",
		File: "shuffle/ops.go", Pkg: "./shuffle",
		Old: "if recordHeader+len(rec) > sh.s.cfg.BufferBytes {", New: "if len(rec) > sh.s.cfg.BufferBytes {"},
	{Name: "nim-take-bound", Focus: "TestDecodeRoundTrip", Rule: "a move takes at most the heap",
		File: "mcts/nim/nim.go", Pkg: "./mcts/nim",
		Old: " || take > int(s.heaps[heap]) {", New: " {"},
	{Name: "nim-winner", Focus: "TestSearchFindsWinningMoves", Rule: "whoever took the last object wins",
		File: "mcts/nim/nim.go", Pkg: "./mcts/nim",
		Old: "return 1 - s.toMove // the previous player took the last object", New: "return s.toMove"},
	{Name: "nim-playout-winner", Focus: "TestSearchFindsWinningMoves", Rule: "a playout counts a win for player 0 when player 0 took the last object",
		File: "mcts/nim/nim.go", Pkg: "./mcts/nim",
		Old: "if 1-toMove == 0 { // player 0 took the last object", New: "if toMove == 0 {"},
	{Name: "launcher-rank-range", Focus: "TestDetectLaunch", Rule: "a launcher's rank lies below its job size",
		File: "dsfabric/launcher.go", Pkg: "./dsfabric",
		Old: "|| ri < 0 || ri >= si {", New: "|| ri < 0 {"},
	{Name: "launcher-tcp-token", Focus: "TestDetectLaunch", Rule: "a tcp coordinator needs a job token",
		File: "dsfabric/launcher.go", Pkg: "./dsfabric",
		Old: "\t\tif l.token == \"\" {\n\t\t\treturn l, fmt.Errorf(", New: "\t\tif false {\n\t\t\treturn l, fmt.Errorf("},
	{Name: "launcher-private-dir", Focus: "TestLauncherDirPrivate", Rule: "the coordinator's directory is private to the user",
		File: "dsfabric/launcher.go", Pkg: "./dsfabric",
		Old: "if fi.Mode().Perm()&0o077 != 0 {", New: "if false {"},
	{Name: "names-valid", Focus: "TestNames", Rule: "thread IDs run from 0 to size × threads − 1",
		File: "dsfabric/names.go", Pkg: "./dsfabric",
		Old: "return int(id) < n.Threads() }", New: "return int(id) <= n.Threads() }"},
	{Name: "names-thread-range", Focus: "TestNames", Rule: "a thread index lies below ThreadsPerProcess",
		File: "dsfabric/names.go", Pkg: "./dsfabric",
		Old: "|| t < 0 || t >= n.ThreadsPerProcess {", New: "|| t < 0 {"},
	{Name: "sync-zero", Focus: "TestSynchronizer", Rule: "a Synchronizer of zero calls is done at once",
		File: "dsfabric/sync.go", Pkg: "./dsfabric",
		Old: "\tif n == 0 {\n\t\ts.finish()", New: "\tif false {\n\t\ts.finish()"},
	{Name: "poller-once", Focus: "TestPoller$", Rule: "a thread has at most one Poller",
		File: "riutils/poller.go", Pkg: "./riutils",
		Old: "if m.delegated {", New: "if false {"},
	{Name: "zone-max-bytes", Focus: "TestBadSizes", Rule: "a zone allocator stays within MaxBytes",
		File: "alloc/zone.go", Pkg: "./alloc",
		Old: "if z.cfg.MaxBytes > 0 && int64(end)+z.largeBytes.Load() > z.cfg.MaxBytes {", New: "if false {"},
	{Name: "dsfabric-handler-cache-id", Focus: "TestPrimitives", Rule: "a worker's cached handler runs only calls that name its ID",
		File: "dsfabric/calls.go", Pkg: "./dsfabric",
		Old: "if fn == nil || c.lastID != h.handler {", New: "if fn == nil {"},
	{Name: "dsfabric-tree-children-bound", Focus: "TestTreeDepth", Rule: "a broadcast is forwarded only to ranks of the job",
		File: "dsfabric/calls.go", Pkg: "./dsfabric",
		Old: "if m > rel && rel+m < size {", New: "if m > rel && rel+m <= size {"},
	{Name: "dsfabric-read-origin-rank", Focus: "TestBufferCallsChecked", Rule: "a read call's origin must be the caller's memory",
		File: "dsfabric/calls.go", Pkg: "./dsfabric",
		Old: "if orig.Length != dest.Length || orig.Process != uint32(src) {", New: "if orig.Length != dest.Length {"},
	{Name: "dsfabric-buffer-dest-length", Focus: "TestBufferCallsChecked", Rule: "a buffer call's destination has the origin's size",
		File: "dsfabric/calls.go", Pkg: "./dsfabric",
		Old: "if dest.Process != uint32(rank) || dest.Length != uint64(orig.Len()) {", New: "if dest.Process != uint32(rank) {"},
	{Name: "dsfabric-refuse-error-flag", Focus: "TestMisuse", Rule: "a refused call's reply is an error",
		File: "dsfabric/calls.go", Pkg: "./dsfabric",
		Old: "f.send(src, callHdr{kind: kindReply, flags: flagError, callID: h.callID}, []byte(why), nil, nil)", New: "f.send(src, callHdr{kind: kindReply, callID: h.callID}, []byte(why), nil, nil)"},
	{Name: "dsfabric-unknown-counts-replies", Focus: "TestMisuse", Rule: "only unanswered calls to unknown handlers are counted",
		File: "dsfabric/calls.go", Pkg: "./dsfabric",
		Old: "if h.flags&(flagReply|flagNotify) == 0 {\n\t\t\t\tf.unknown.Add(1)", New: "if true {\n\t\t\t\tf.unknown.Add(1)"},
	{Name: "dsfabric-handler-error-flag", Focus: "TestBufferCallsChecked", Rule: "a handler's error reaches its caller as ErrRemote",
		File: "dsfabric/calls.go", Pkg: "./dsfabric",
		Old: "\t\t\trh.flags = flagError\n", New: ""},
	{Name: "dsfabric-send-buffer-flush", Focus: "TestSendBuffersReused", Rule: "a send ring whose buffers are all in flight is flushed, not reported full",
		File: "dsfabric/calls.go", Pkg: "./dsfabric",
		Old: "if errors.Is(err, alloc.ErrBusy) {\n\t\tif err := p.calls.Flush(f.ctx)", New: "if false && errors.Is(err, alloc.ErrBusy) {\n\t\tif err := p.calls.Flush(f.ctx)"},
	{Name: "dsfabric-sent-count", Focus: "TestSection3_2_SendCredits", Rule: "every message sent spends a credit",
		File: "dsfabric/calls.go", Pkg: "./dsfabric",
		Old: "\tp.sent++\n", New: ""},
	{Name: "dsfabric-max-message", Focus: "TestMisuse", Rule: "a message over MaxMessage is refused",
		File: "dsfabric/calls.go", Pkg: "./dsfabric",
		Old: "if n > f.cfg.MaxMessage {", New: "if n > f.cfg.MaxMessage+callHeader {"},
	{Name: "dsfabric-close-child-errors", Focus: "TestKilledRankNoticed", Rule: "Close reports the self-launched ranks that failed",
		File: "dsfabric/fabric.go", Pkg: "./dsfabric",
		Old: "\t\t\tif e != nil {\n\t\t\t\terrs = append(errs, e)", New: "\t\t\tif e != nil && false {\n\t\t\t\terrs = append(errs, e)"},
	{Name: "dsfabric-transports-mixed", Focus: "TestAdvertisedAddresses", Rule: "a mix of shm and tcp peers is reported as shm+tcp",
		File: "dsfabric/fabric.go", Pkg: "./dsfabric",
		Old: "\tcase seen[\"shm\"] && seen[\"tcp\"]:\n\t\treturn \"shm+tcp\"\n\tcase seen[\"tcp\"]:", New: "\tcase seen[\"tcp\"]:\n\t\treturn \"tcp\"\n\tcase seen[\"shm\"] && seen[\"tcp\"]:"},
	{Name: "dsfabric-transmitter-closed", Focus: "TestUseAfterClose", Rule: "no one-sided transmitter after Close",
		File: "dsfabric/fabric.go", Pkg: "./dsfabric",
		Old: "\tif f.closing.Load() {\n\t\treturn nil, ErrClosed\n\t}\n\treturn f.peers[rank].tx, nil", New: "\treturn f.peers[rank].tx, nil"},
	{Name: "dsfabric-pdeathsig", Focus: "TestRanksDieWithLauncher", Rule: "a self-launched rank dies with its launcher",
		File: "dsfabric/fabric.go", Pkg: "./dsfabric",
		Old: "cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}", New: "cmd.SysProcAttr = &syscall.SysProcAttr{}"},
	{Name: "dsfabric-locked-writer", Focus: "TestChildOutputSerialised", Rule: "the ranks' output reaches a shared writer one write at a time",
		File: "dsfabric/fabric.go", Pkg: "./dsfabric",
		Old: "if _, ok := w.(*os.File); ok || w == nil {", New: "if true {"},
	{Name: "dsfabric-advertise-unspecified", Focus: "TestAdvertisedAddresses", Rule: "a tcp listener on every interface advertises an address peers reach",
		File: "dsfabric/fabric.go", Pkg: "./dsfabric",
		Old: "(host == \"\" || ip != nil && ip.IsUnspecified())", New: "(host == \"\" || ip != nil && false)"},
	{Name: "dsfabric-ofi-node-host", Focus: "TestAdvertisedAddresses", Rule: "ofi-tcp binds the address Listen names",
		File: "dsfabric/fabric.go", Pkg: "./dsfabric",
		Old: "\tcase err == nil && host != \"\" && !net.ParseIP(host).IsUnspecified():\n\t\toc.Node = host", New: "\tcase err == nil && false && host != \"\":\n\t\toc.Node = host"},
	{Name: "dsfabric-connect-lanes", Focus: "TestConnectPeersRefusesExtraEndpoints", Rule: "two endpoints per peer, no more",
		File: "dsfabric/fabric.go", Pkg: "./dsfabric",
		Old: "lane[e.peer] > 1 {", New: "lane[e.peer] > 2 {"},
	{Name: "riutils-alloc-dst-rank", Focus: "TestSection3_AllocationRequestsChecked", Rule: "chunks are allocated only for this process's threads",
		File: "riutils/messenger.go", Pkg: "./riutils",
		Old: "!n.Valid(dst) || n.Rank(dst) != f.Rank() || size", New: "!n.Valid(dst) || size"},
	{Name: "riutils-alloc-max-chunks", Focus: "TestSection3_AllocationRequestsChecked", Rule: "an allocation grants at most MaxChunks",
		File: "riutils/messenger.go", Pkg: "./riutils",
		Old: "count < 1 || count > p.cfg.MaxChunks {", New: "count < 1 {"},
	{Name: "riutils-batches-fifo", Focus: "TestGrowthInTheMiddle", Rule: "a sender's chunk batches are taken in the order granted",
		File: "riutils/messenger.go", Pkg: "./riutils",
		Old: "\tb := in.batches[0]\n\tin.batches = in.batches[1:]", New: "\tb := in.batches[len(in.batches)-1]\n\tin.batches = in.batches[:len(in.batches)-1]"},
	{Name: "riutils-stats-keeper", Focus: "TestRetryAsyncHelperSends", Rule: "Stats count the calls RetryAsync's helper sent",
		File: "riutils/messenger.go", Pkg: "./riutils",
		Old: "\t\ts.Calls += k.stats.Calls\n", New: ""},
	{Name: "riutils-chunk-size-page", Focus: "TestConfigChecks", Rule: "ChunkSize is whole pages",
		File: "riutils/messenger.go", Pkg: "./riutils",
		Old: "c.ChunkSize < 8<<10 || c.ChunkSize%4096 != 0 ||", New: "c.ChunkSize < 8<<10 ||"},
	{Name: "rdmo-abandoned-release", Focus: "TestAbandonedCallsFreeTheirSlots", Rule: "an abandoned call's slot is freed when its reply comes",
		File: "rdmo/client.go", Pkg: "./rdmo",
		Old: "\tc.release(s) // abandoned by its waiter\n", New: ""},
	{Name: "rdmo-wait-error-late", Focus: "TestAbandonedCallsFreeTheirSlots", Rule: "a call answered as its waiter gives up frees its slot",
		File: "rdmo/client.go", Pkg: "./rdmo",
		Old: "\t\tif s.state.CompareAndSwap(slotPending, slotAbandoned) {\n\t\t\treturn 0, out, err\n\t\t}", New: "\t\ts.state.CompareAndSwap(slotPending, slotAbandoned)\n\t\treturn 0, out, err"},
	{Name: "rdmo-busy-error", Focus: "TestSection3_1_Failures", Rule: "a full engine queue reaches the initiator as ErrBusy",
		File: "rdmo/client.go", Pkg: "./rdmo",
		Old: "\tcase errors.Is(err, dtutils.ErrBusy):\n\t\treturn ErrBusy", New: "\tcase errors.Is(err, dtutils.ErrBusy) && false:\n\t\treturn ErrBusy"},
	{Name: "rdmo-dup-conn", Focus: "TestClientOneQueuePairPerProcess", Rule: "a client has one queue pair per target process",
		File: "rdmo/client.go", Pkg: "./rdmo",
		Old: "if _, dup := c.conns[r]; dup {", New: "if _, dup := c.conns[r]; dup && false {"},
	{Name: "rdmo-handover", Focus: "TestConcurrentWaitersHandOver", Rule: "a waiter done polling hands the polling to another",
		File: "rdmo/client.go", Pkg: "./rdmo",
		Old: "\t\t\tcn.handOver(s)\n", New: ""},
	{Name: "hex-winner-min-stones", Focus: "TestWinnerHandMade", Rule: "a chain of exactly size stones wins",
		File: "hex/board.go", Pkg: "./hex",
		Old: "if b.stones < b.size {", New: "if b.stones <= b.size {"},
	{Name: "mcts-budget-exact", Focus: "TestDistributed", Rule: "a phase ends at its budget, no later",
		File: "mcts/distributed.go", Pkg: "./mcts",
		Old: "if !p.timedOut && done >= p.budget.Load() ||", New: "if !p.timedOut && done > p.budget.Load() ||"},
	{Name: "mcts-deadline", Focus: "TestMoveTime", Rule: "a phase ends at its time limit",
		File: "mcts/distributed.go", Pkg: "./mcts",
		Old: "if !p.timedOut && !p.deadline.IsZero() && done > 0 && time.Now().After(p.deadline) {", New: "if false {"},
	{Name: "mcts-search-finished", Focus: "TestSearchCancel", Rule: "a finished game is not searched",
		File: "mcts/distributed.go", Pkg: "./mcts",
		Old: "\tif state.Winner() >= 0 {", New: "\tif false {"},
	{Name: "shuffle-wiring-shape", Focus: "TestWiringMismatch", Rule: "a peer that wired another number of endpoints is refused",
		File: "shuffle/fabric.go", Pkg: "./shuffle",
		Old: "if m.Endpoints != E || len(m.Send) != want || len(m.Recv) != want || len(m.Offers) != E*E {", New: "if false {"},
	{Name: "ofi-deliver-order", Focus: "TestOFIDeliverInSequence", Rule: "a queue pair's stream takes ofi messages in their sequence", Tags: "ofi",
		File: "dtutils/ofi.go", Pkg: "./dtutils",
		Old: "\tif m.seq != q.next {\n\t\tq.early = append(q.early, m)", New: "\tif false && m.seq != q.next {\n\t\tq.early = append(q.early, m)"},
	{Name: "ofi-deliver-early-chain", Focus: "TestOFIDeliverInSequence", Rule: "messages held early are delivered once the gap before them fills", Tags: "ofi",
		File: "dtutils/ofi.go", Pkg: "./dtutils",
		Old: "k := slices.IndexFunc(q.early, func(e ofiMsg) bool { return e.seq == q.next })", New: "k := slices.IndexFunc(q.early, func(e ofiMsg) bool { return false })"},
	{Name: "ofi-inject-sent", Focus: "TestOFIBuffersRecycled", Rule: "an injected send frees its buffer at once", Tags: "ofi",
		File: "dtutils/ofi.go", Pkg: "./dtutils",
		Old: "\t\tcase ret == 0 && inject:\n\t\t\tp.sent(i)\n\t\t\treturn nil", New: "\t\tcase ret == 0 && inject:\n\t\t\treturn nil"},
	{Name: "ofi-peer-timeout", Focus: "TestOFIPeerKilled", Rule: "a peer silent for PeerTimeout with answers due is lost", Tags: "ofi",
		File: "dtutils/ofi.go", Pkg: "./dtutils",
		Old: "\t\tif quiet >= p.cfg.PeerTimeout {", New: "\t\tif false && quiet >= p.cfg.PeerTimeout {"},
	{Name: "ofi-connect-twice", Focus: "TestOFIConnectChecks", Rule: "a queue pair connects once", Tags: "ofi",
		File: "dtutils/ofi.go", Pkg: "./dtutils",
		Old: "\tif q.connected.Load() {\n\t\treturn fmt.Errorf(\"%w: queue pair already connected\", ErrBadEndpoint)", New: "\tif false {\n\t\treturn fmt.Errorf(\"%w: queue pair already connected\", ErrBadEndpoint)"},
	{Name: "ofi-empty-addr", Focus: "TestOFIConnectChecks", Rule: "an ofi endpoint without an address is refused", Tags: "ofi",
		File: "dtutils/ofi.go", Pkg: "./dtutils",
		Old: "\tif len(ep.addr) == 0 {", New: "\tif false {"},
	{Name: "ofi-close-message", Focus: "TestOFIPeerClosesMidStream|TestTransportSuite/ofi", Rule: "Close tells the peer, whose queue pair fails at once", Tags: "ofi",
		File: "dtutils/ofi.go", Pkg: "./dtutils",
		Old: "\tif q.connected.Load() && !q.closed.Load() {\n\t\tq.wmu.Lock() // the close message", New: "\tif false && q.connected.Load() && !q.closed.Load() {\n\t\tq.wmu.Lock() // the close message"},
	{Name: "ofi-control-seq", Focus: "TestOFIOneSided|TestOFICrossProcess", Rule: "control messages take their place in the sequence", Tags: "ofi",
		File: "dtutils/ofi.go", Pkg: "./dtutils",
		Old: "\t\tcase err == nil:\n\t\t\tq.seq++\n\t\t\treturn\n", New: "\t\tcase err == nil:\n\t\t\treturn\n"},
	{Name: "ofi-sent-frees", Focus: "TestTransportSuite/ofi", Rule: "a completed send frees its buffer", Tags: "ofi",
		File: "dtutils/ofi.go", Pkg: "./dtutils",
		Old: "\tp.sendOwner[i] = nil\n\tp.sendFree.put(i)\n", New: "\tp.sendOwner[i] = nil\n"},
	{Name: "ofi-io-repost", Focus: "TestOFIBuffersRecycled", Rule: "a message read to its end is posted again for receiving", Tags: "ofi",
		File: "dtutils/ofi.go", Pkg: "./dtutils",
		Old: "\t\t\tq.in.pop() // zeroes *m\n\t\t\tq.prov.repost(i)\n", New: "\t\t\tq.in.pop() // zeroes *m\n\t\t\t_ = i\n"},
	{Name: "ofi-probe-answer", Focus: "TestOFISlowOperatorNotLost", Rule: "a probe is answered", Tags: "ofi",
		File: "dtutils/ofi.go", Pkg: "./dtutils",
		Old: "\t\t\tgo q.control(ofiKindAck)\n", New: "\n"},
	{Name: "ofi-probe-send", Focus: "TestOFISlowOperatorNotLost", Rule: "a queue pair that hears nothing while it awaits answers probes its peer", Tags: "ofi",
		File: "dtutils/ofi.go", Pkg: "./dtutils",
		Old: "\t\t\tgo q.control(ofiKindProbe)\n", New: "\n"},
	{Name: "ofi-keeper-poll", Focus: "TestOFISlowOperatorNotLost", Rule: "probes are answered while the engine runs a long Operator", Tags: "ofi",
		File: "dtutils/ofi.go", Pkg: "./dtutils",
		Old: "\t\tif p.poll() {\n\t\t\tp.kick()\n\t\t}\n\t\tp.probe()", New: "\t\tp.probe()"},
	{Name: "ofi-unknown-token-repost", Focus: "TestOFIBuffersRecycled", Rule: "a message for an unknown queue pair is dropped and its buffer posted again", Tags: "ofi",
		File: "dtutils/ofi.go", Pkg: "./dtutils",
		Old: "\t\tp.log.Debug(\"dropping an ofi message for an unknown queue pair\", \"token\", h.token)\n\t\tp.repost(i)\n", New: "\t\tp.log.Debug(\"dropping an ofi message for an unknown queue pair\", \"token\", h.token)\n"},
	{Name: "numa-spread-index", Focus: "TestLoadFakeTrees", Rule: "spread places worker i on node i mod N, then along that node's CPUs",
		File: "numa/placement.go", Pkg: "./numa",
		Old: "return n.CPUs[(i/len(withCPUs))%len(n.CPUs)], n.ID, nil", New: "return n.CPUs[i%len(n.CPUs)], n.ID, nil"},
	{Name: "numa-fill-wrap", Focus: "TestLoadFakeTrees", Rule: "fill wraps round when there are more workers than CPUs",
		File: "numa/placement.go", Pkg: "./numa",
		Old: "\t\tk := i % total\n", New: "\t\tk := i\n"},
	{Name: "numa-place-empty-nodes", Focus: "TestLoadFakeTrees", Rule: "placement skips nodes without CPUs",
		File: "numa/placement.go", Pkg: "./numa",
		Old: "\t\tif len(n.CPUs) > 0 {\n\t\t\twithCPUs = append(withCPUs, n)", New: "\t\tif true {\n\t\t\twithCPUs = append(withCPUs, n)"},
	{Name: "numa-distance-count", Focus: "TestLoadFakeTrees", Rule: "every node reports one distance per node",
		File: "numa/topology.go", Pkg: "./numa",
		Old: "if n.Distances != nil && len(n.Distances) != len(t.Nodes) {", New: "if false {"},
	{Name: "numa-policy-case", Focus: "TestLoadFakeTrees", Rule: "policy names are case-insensitive",
		File: "numa/placement.go", Pkg: "./numa",
		Old: "switch strings.ToLower(s) {", New: "switch strings.TrimSpace(s) {"},
	{Name: "numa-restrict-keeps", Focus: "TestLoadFakeTrees", Rule: "Restrict keeps only the allowed CPUs",
		File: "numa/topology.go", Pkg: "./numa",
		Old: "\t\t\tif ok[c] {\n\t\t\t\tr.Nodes[i].CPUs", New: "\t\t\tif true || ok[c] {\n\t\t\t\tr.Nodes[i].CPUs"},
	{Name: "numa-node-id", Focus: "TestLoadFakeTrees", Rule: "only nodeN directories with N ≥ 0 are nodes",
		File: "numa/topology.go", Pkg: "./numa",
		Old: "\t\tif err != nil || id < 0 {", New: "\t\tif err != nil {"},
	{Name: "numa-single-node-fallback", Focus: "TestLoadFakeTrees", Rule: "without node or online lists, one node holds CPUs 0…NumCPU−1",
		File: "numa/topology.go", Pkg: "./numa",
		Old: "\tif len(cpus) == 0 {\n\t\tfor i := 0; i < runtime.NumCPU(); i++ {", New: "\tif false {\n\t\tfor i := 0; i < runtime.NumCPU(); i++ {"},
	{Name: "general-max-bytes", Focus: "TestBadSizes", Rule: "the general allocator stays within MaxBytes",
		File: "alloc/general.go", Pkg: "./alloc",
		Old: "if g.cfg.MaxBytes > 0 && g.taken+int64(cs) > g.cfg.MaxBytes {", New: "if false {"},
	{Name: "general-first-fit", Focus: "TestGeneralBestFitDiffers", Rule: "first fit takes the lowest extent that fits",
		File: "alloc/general.go", Pkg: "./alloc",
		Old: "\t\t\tif g.cfg.Fit == FirstFit {\n\t\t\t\treturn ci, ei", New: "\t\t\tif false {\n\t\t\t\treturn ci, ei"},
	{Name: "general-merge-following", Focus: "TestGeneralFreeAndReuse", Rule: "a freed block merges with the free extent after it",
		File: "alloc/general.go", Pkg: "./alloc",
		Old: "\tif i < len(c.free) && e.off+e.n == c.free[i].off {\n\t\tc.free[i].off = e.off", New: "\tif false {\n\t\tc.free[i].off = e.off"},
	{Name: "general-free-unknown", Focus: "TestGeneralFreeAndReuse", Rule: "Free of memory not handed out is refused",
		File: "alloc/general.go", Pkg: "./alloc",
		Old: "\tsize, ok := g.used[k]\n\tif !ok {", New: "\tsize, ok := g.used[k]\n\tif !ok && false {"},
	{Name: "size-class-step", Focus: "TestSizeClass|TestGeneralFreeAndReuse", Rule: "size classes step by at least 64 bytes",
		File: "alloc/general.go", Pkg: "./alloc",
		Old: "\tif step < minClass {\n\t\tstep = minClass", New: "\tif false {\n\t\tstep = minClass"},
	{Name: "htp-id-echo", Focus: "TestHTPSession", Rule: "a reply carries its command's id",
		File: "hex/htp.go", Pkg: "./hex",
		Old: "\t\t\tfmt.Fprintf(out, \"=%s %s\\n\\n\", id, res)", New: "\t\t\tfmt.Fprintf(out, \"= %s\\n\\n\", res)"},
	{Name: "htp-comment-strip", Focus: "TestHTPGameRecord", Rule: "text after # is a comment",
		File: "hex/htp.go", Pkg: "./hex",
		Old: "line := strings.TrimSpace(strings.SplitN(in.Text(), \"#\", 2)[0])", New: "line := strings.TrimSpace(in.Text())"},
	{Name: "htp-undo-history", Focus: "TestHTPClock", Rule: "undo takes back one move at a time",
		File: "hex/htp.go", Pkg: "./hex",
		Old: "\t\te.board = e.history[len(e.history)-1]\n\t\te.history = e.history[:len(e.history)-1]", New: "\t\te.board = e.history[len(e.history)-1]"},
	{Name: "htp-play-after-win", Focus: "TestHTPSession", Rule: "no play after the game is over",
		File: "hex/htp.go", Pkg: "./hex",
		Old: "\t\tif e.board.Winner() != Empty {\n\t\t\treturn \"\", ErrGameOver\n\t\t}\n\t\tbefore := e.board", New: "\t\tif false {\n\t\t\treturn \"\", ErrGameOver\n\t\t}\n\t\tbefore := e.board"},
	{Name: "htp-play-history", Focus: "TestHTPClock", Rule: "a play can be undone",
		File: "hex/htp.go", Pkg: "./hex",
		Old: "\t\t\treturn \"\", fmt.Errorf(\"illegal move %s: %w\", args[1], err)\n\t\t}\n\t\te.history = append(e.history, before)", New: "\t\t\treturn \"\", fmt.Errorf(\"illegal move %s: %w\", args[1], err)\n\t\t}\n\t\t_ = before"},
	{Name: "htp-genmove-history", Focus: "TestHTPClock", Rule: "a generated move can be undone",
		File: "hex/htp.go", Pkg: "./hex",
		Old: "\t\te.history = append(e.history, before)\n\t\treturn e.board.CellName(c), nil", New: "\t\t_ = before\n\t\treturn e.board.CellName(c), nil"},
	{Name: "htp-clear-clock", Focus: "TestHTPGameRecord", Rule: "clear_board resets the clocks",
		File: "hex/htp.go", Pkg: "./hex",
		Old: "\t\te.board, _ = New(e.board.Size())\n\t\te.history = e.history[:0]\n\t\te.clock.reset()", New: "\t\te.board, _ = New(e.board.Size())\n\t\te.history = e.history[:0]"},
	{Name: "htp-final-score", Focus: "TestHTPGameRecord", Rule: "final_score names the side that connected",
		File: "hex/htp.go", Pkg: "./hex",
		Old: "\t\tcase White:\n\t\t\treturn \"W+\", nil", New: "\t\tcase White:\n\t\t\treturn \"B+\", nil"},
	{Name: "htp-boardsize-history", Focus: "TestHTPGameRecord", Rule: "a new board size leaves nothing to undo",
		File: "hex/htp.go", Pkg: "./hex",
		Old: "\t\te.board = b\n\t\te.history = e.history[:0]", New: "\t\te.board = b"},
	{Name: "htp-seconds-negative", Focus: "TestHTPGameRecord", Rule: "times are whole seconds ≥ 0",
		File: "hex/htp.go", Pkg: "./hex",
		Old: "if err != nil || n < 0 {\n\t\treturn 0, fmt.Errorf(\"invalid time", New: "if err != nil {\n\t\treturn 0, fmt.Errorf(\"invalid time"},
	{Name: "htp-spend", Focus: "TestHTPClock", Rule: "a generated move's time comes off its side's clock",
		File: "hex/htp.go", Pkg: "./hex",
		Old: "\t\te.clock.spend(col, e.Now().Sub(t0))", New: "\t\t_ = t0"},
}

func main() {
	only := flag.String("only", "", "comma-separated mutation names (default: all)")
	md := flag.String("md", "", "also write the table as markdown to FILE")
	limit := flag.Duration("limit", 90*time.Second, "time limit of one mutated test run")
	slow := flag.Duration("slow", 60*time.Second, "a mutation caught later than this counts as a failure")
	flag.Parse()
	selected := mutations
	if *only != "" {
		selected = nil
		for _, n := range strings.Split(*only, ",") {
			for _, m := range mutations {
				if m.Name == n {
					selected = append(selected, m)
				}
			}
		}
	}
	scratch, err := copyModule()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
	defer os.RemoveAll(scratch)
	type row struct {
		m       mutation
		verdict string
		by      string
		secs    float64
	}
	var rows []row
	bad := 0
	for _, m := range selected {
		fmt.Fprintf(os.Stderr, "mutate: %s ... ", m.Name)
		verdict, by, took := apply(scratch, m, *limit)
		if verdict != "caught" && verdict != "skipped" || took > *slow {
			bad++
		}
		fmt.Fprintf(os.Stderr, "%s %s (%.1f s)\n", verdict, by, took.Seconds())
		rows = append(rows, row{m, verdict, by, took.Seconds()})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mutation\tresult\tby\tseconds\t")
	var b strings.Builder
	b.WriteString("| mutation | the rule it breaks | result | caught by | seconds |\n|---|---|---|---|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t\n", r.m.Name, r.verdict, r.by, r.secs)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f |\n", r.m.Name, r.m.Rule, r.verdict, r.by, r.secs)
	}
	tw.Flush()
	if *md != "" {
		if err := os.WriteFile(*md, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "mutate:", err)
			os.Exit(2)
		}
	}
	if bad > 0 {
		fmt.Fprintf(os.Stderr, "mutate: %d of %d mutations survived, no longer apply, or were caught after %v\n", bad, len(rows), *slow)
		os.Exit(1)
	}
}

// copyModule copies the files git knows (tracked, and untracked ones it
// does not ignore) into a scratch directory.
func copyModule() (string, error) {
	out, err := exec.Command("git", "ls-files", "-co", "--exclude-standard").Output()
	if err != nil {
		return "", fmt.Errorf("listing files (run from the repository root): %w", err)
	}
	dir, err := os.MkdirTemp("", "seriema-mutate-")
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := sc.Text()
		if strings.HasPrefix(f, "docs/img/") {
			continue
		}
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree
		}
		if err != nil {
			return "", err
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

var failLine = regexp.MustCompile(`--- FAIL: (\S+)`)

// apply mutates, tests and restores; it returns the verdict, what caught
// the mutation and how long the test run took.
func apply(scratch string, m mutation, limit time.Duration) (string, string, time.Duration) {
	if strings.Contains(m.Tags, "ofi") {
		if _, err := os.Stat("/usr/include/rdma/fabric.h"); err != nil {
			return "skipped", "libfabric-dev is not installed", 0
		}
	}
	path := filepath.Join(scratch, m.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		return "stale", err.Error(), 0
	}
	if n := bytes.Count(orig, []byte(m.Old)); n != 1 {
		return "stale", fmt.Sprintf("the code to mutate occurs %d times in %s", n, m.File), 0
	}
	if err := os.WriteFile(path, bytes.Replace(orig, []byte(m.Old), []byte(m.New), 1), 0o644); err != nil {
		return "stale", err.Error(), 0
	}
	defer os.WriteFile(path, orig, 0o644)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var out bytes.Buffer
	run := func(args ...string) error {
		out.Reset()
		base := []string{"test", "-count=1", "-failfast", "-timeout", limit.String()}
		if m.Tags != "" {
			base = append(base, "-tags", m.Tags)
		}
		cmd := exec.CommandContext(ctx, "go", append(base, args...)...)
		cmd.Dir = scratch
		cmd.Stdout, cmd.Stderr = &out, &out
		return cmd.Run()
	}
	if m.Focus != "" {
		err = run("-run", m.Focus, m.Pkg)
	}
	if err == nil {
		err = run(m.Pkg)
	}
	took := time.Since(start)
	if err == nil {
		return "survived", "", took
	}
	switch {
	case ctx.Err() != nil:
		return "caught", "the time limit (no test failed first)", took
	case bytes.Contains(out.Bytes(), []byte("[build failed]")), bytes.Contains(out.Bytes(), []byte("[setup failed]")):
		return "invalid", "the mutated code does not build", took
	}
	var by []string
	for _, l := range failLine.FindAllStringSubmatch(out.String(), -1) {
		by = append(by, l[1])
	}
	if len(by) == 0 {
		if bytes.Contains(out.Bytes(), []byte("panic:")) {
			return "caught", "a panic", took
		}
		io.Copy(io.Discard, &out)
		return "caught", "go test exit status", took
	}
	return "caught", by[len(by)-1], took
}
