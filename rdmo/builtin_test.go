package rdmo

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Tests of the five RDMOs of §3.3 (Table 2), each against an oracle and
// under many initiators on one target, with the RDMO and its one-sided
// sequence working on the same instance at once.

const testInitiators = 4

func tuple(who, i int) []byte {
	return []byte(fmt.Sprintf("tuple %d/%d %s", who, i, bytes.Repeat([]byte{'x'}, (who*7+i)%40)))
}

func TestSection3_3_SlottedAppend(t *testing.T) {
	forTransports(t, func(t *testing.T, tr testTransport) {
		w := newWorld(t, tr, worldConfig{initiators: testInitiators})
		ctx := testCtx(t)
		const per = 150
		mem, loc := w.instance(t, 0, 64<<10)
		if _, err := InitSlottedPage(mem.Bytes(), 2*testInitiators*per); err != nil {
			t.Fatal(err)
		}
		page := w.create(t, SlottedPageType, mem)
		var wg sync.WaitGroup
		slots := make([]map[uint64][]byte, testInitiators)
		for who := range w.initiator {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in := w.initiator[who]
				slots[who] = map[uint64][]byte{}
				for i := 0; i < per; i++ {
					tp := tuple(who, i)
					var s uint64
					var code Code
					var err error
					if i%2 == 0 {
						s, code, err = in.client.SlottedAppend(ctx, page, tp)
					} else {
						s, code, err = in.rdma.SlottedAppend(ctx, loc, tp)
					}
					for err == nil && code == CodeContended {
						s, code, err = in.client.SlottedAppend(ctx, page, tp)
					}
					if err != nil || code != OK {
						t.Errorf("initiator %d append %d: code %v err %v", who, i, code, err)
						return
					}
					slots[who][s] = tp
				}
			}()
		}
		wg.Wait()
		// Oracle: every append owns a distinct slot holding exactly its tuple.
		got := SlottedTuples(mem.Bytes())
		if len(got) != testInitiators*per {
			t.Fatalf("%d slots used, want %d", len(got), testInitiators*per)
		}
		seen := map[uint64]bool{}
		for who, m := range slots {
			for s, tp := range m {
				if seen[s] {
					t.Fatalf("slot %d given twice", s)
				}
				seen[s] = true
				if !bytes.Equal(got[s], tp) {
					t.Fatalf("initiator %d: slot %d holds %q, want %q", who, s, got[s], tp)
				}
			}
		}
		// A full page refuses, both ways.
		small, sloc := w.instance(t, 1<<20, 32+8*2+16)
		if _, err := InitSlottedPage(small.Bytes(), 2); err != nil {
			t.Fatal(err)
		}
		sp := w.create(t, SlottedPageType, small)
		in := w.initiator[0]
		if _, code, err := in.client.SlottedAppend(ctx, sp, make([]byte, 10)); code != OK || err != nil {
			t.Fatal(code, err)
		}
		if _, code, err := in.client.SlottedAppend(ctx, sp, make([]byte, 10)); code != CodePageFull || err != nil {
			t.Fatalf("append past the data room: %v %v", code, err)
		}
		if _, code, err := in.rdma.SlottedAppend(ctx, sloc, make([]byte, 6)); code != OK || err != nil {
			t.Fatal(code, err)
		}
		if _, code, err := in.rdma.SlottedAppend(ctx, sloc, nil); code != CodePageFull || err != nil {
			t.Fatalf("rdma append past the slots: %v %v", code, err)
		}
		// Past the slots with data room left, through the RDMO: the page
		// has 2 slots and 64 data bytes.
		pg, _ := w.instance(t, 2<<20, 32+8*2+64)
		if _, err := InitSlottedPage(pg.Bytes(), 2); err != nil {
			t.Fatal(err)
		}
		sl := w.create(t, SlottedPageType, pg)
		for i := 0; i < 2; i++ {
			if _, code, err := in.client.SlottedAppend(ctx, sl, []byte{byte(i)}); code != OK || err != nil {
				t.Fatal(code, err)
			}
		}
		if _, code, err := in.client.SlottedAppend(ctx, sl, []byte{9}); code != CodePageFull || err != nil {
			t.Fatalf("append past the slots: %v %v", code, err)
		}
		if got := SlottedTuples(pg.Bytes()); len(got) != 2 || !bytes.Equal(got[0], []byte{0}) || !bytes.Equal(got[1], []byte{1}) {
			t.Fatalf("page after a refused append: %q", got)
		}
		w.checkDirect(t, tr.direct)
	})
}

func TestSection3_3_ConditionalGather(t *testing.T) {
	forTransports(t, func(t *testing.T, tr testTransport) {
		w := newWorld(t, tr, worldConfig{initiators: testInitiators})
		ctx := testCtx(t)
		const buckets, keys, per = 8, 16, 60
		mem, loc := w.instance(t, 0, 1<<20)
		if _, err := InitVersionChains(mem.Bytes(), buckets); err != nil {
			t.Fatal(err)
		}
		chains := w.create(t, VersionChainsType, mem)
		type ver struct{ key, begin, value uint64 }
		var mu sync.Mutex
		var all []ver
		var wg sync.WaitGroup
		for who := range w.initiator {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewSource(int64(who)))
				for i := 0; i < per; i++ {
					v := ver{key: uint64(r.Intn(keys)), begin: uint64(r.Intn(1000)), value: uint64(who<<20 | i)}
					code, err := w.initiator[who].client.InsertVersion(ctx, chains, v.key%buckets, v.key, v.begin, v.value)
					for err == nil && code == CodeContended {
						code, err = w.initiator[who].client.InsertVersion(ctx, chains, v.key%buckets, v.key, v.begin, v.value)
					}
					if err != nil || code != OK {
						t.Errorf("insert: %v %v", code, err)
						return
					}
					mu.Lock()
					all = append(all, v)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		sortV := func(vs []Version) {
			slices.SortFunc(vs, func(a, b Version) int {
				if a.Begin != b.Begin {
					return int(int64(a.Begin - b.Begin))
				}
				return int(int64(a.Value - b.Value))
			})
		}
		in := w.initiator[0]
		for key := uint64(0); key < keys; key++ {
			for _, ts := range []uint64{0, 250, 500, 999} {
				var want []Version
				for _, v := range all {
					if v.key == key && v.begin <= ts {
						want = append(want, Version{v.begin, v.value})
					}
				}
				got, code, err := in.client.ConditionalGather(ctx, chains, key%buckets, key, ts)
				// Each bucket holds 2 keys × about 15 versions: within MaxHops,
				// though matches may pass MaxGather.
				if err != nil || (code != OK && code != CodeTruncated) {
					t.Fatalf("gather key %d ts %d: %v %v", key, ts, code, err)
				}
				rgot, rcode, err := in.rdma.ConditionalGather(ctx, loc, buckets, key%buckets, key, ts)
				if err != nil || rcode != code || !slices.Equal(rgot, got) {
					t.Fatalf("rdma gather differs: %v %v (%v) vs %v (%v)", err, rgot, rcode, got, code)
				}
				sortV(want)
				sortV(got)
				if code == OK && !slices.Equal(got, want) {
					t.Fatalf("gather key %d ts %d: %v, want %v", key, ts, got, want)
				}
				if code == CodeTruncated && (len(got) != MaxGather || len(want) <= MaxGather) {
					t.Fatalf("gather key %d ts %d truncated at %d of %d", key, ts, len(got), len(want))
				}
			}
		}
		// A full set of nodes refuses the next version, and the chains
		// stay whole: one bucket, room for two nodes.
		small, _ := w.instance(t, 2<<20, chainsHeader+8+2*nodeBytes)
		if n, err := InitVersionChains(small.Bytes(), 1); err != nil || n != 2 {
			t.Fatal(n, err)
		}
		sc := w.create(t, VersionChainsType, small)
		for i := uint64(0); i < 3; i++ {
			code, err := in.client.InsertVersion(ctx, sc, 0, 5, i, 100+i)
			if want := map[bool]Code{true: OK, false: CodeFull}[i < 2]; code != want || err != nil {
				t.Fatalf("insert %d into 2 nodes: %v %v, want %v", i, code, err, want)
			}
		}
		if got, code, err := in.client.ConditionalGather(ctx, sc, 0, 5, 10); err != nil || code != OK || !slices.Equal(got, []Version{{1, 101}, {0, 100}}) {
			t.Fatalf("gather after a refused insert: %v %v %v", got, code, err)
		}
		w.checkDirect(t, tr.direct)
	})
}

func recordPattern(v uint64, n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], v)
	}
	return b
}

func untorn(b []byte) bool {
	for i := 8; i < len(b); i += 8 {
		if !bytes.Equal(b[i:i+8], b[:8]) {
			return false
		}
	}
	return true
}

func TestSection3_3_SignaledRead(t *testing.T) {
	forTransports(t, func(t *testing.T, tr testTransport) {
		w := newWorld(t, tr, worldConfig{initiators: testInitiators})
		ctx := testCtx(t)
		const data, rounds = 1024, 200
		mem, loc := w.instance(t, 0, recordHeader+data)
		if err := InitLockedRecord(mem.Bytes()); err != nil {
			t.Fatal(err)
		}
		rec := w.create(t, LockedRecordType, mem)
		var writes, reads, torn atomic.Int64
		var wg sync.WaitGroup
		for who := range w.initiator {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in := w.initiator[who]
				var buf []byte
				for i := 0; i < rounds; i++ {
					var code Code
					var err error
					switch (who + i) % 4 {
					case 0:
						code, err = in.client.LockedWrite(ctx, rec, recordPattern(uint64(who<<20|i), data))
					case 1:
						code, err = in.rdma.LockedWrite(ctx, loc, recordPattern(uint64(who<<20|i), data))
					case 2:
						code, buf, err = in.client.SignaledRead(ctx, rec, 16, buf[:0])
					case 3:
						code, buf, err = in.rdma.SignaledRead(ctx, loc, 16, buf[:0])
					}
					if err != nil || (code != OK && code != CodeLocked) {
						t.Errorf("initiator %d op %d: %v %v", who, i, code, err)
						return
					}
					if code != OK {
						continue
					}
					if (who+i)%4 < 2 {
						writes.Add(1)
						continue
					}
					reads.Add(1)
					if len(buf) != data || !untorn(buf) {
						torn.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if torn.Load() != 0 {
			t.Fatalf("%d of %d reads torn", torn.Load(), reads.Load())
		}
		if got := binary.LittleEndian.Uint64(mem.Bytes()[8:]); got != uint64(writes.Load()) {
			t.Fatalf("version %d after %d successful writes", got, writes.Load())
		}
		if reads.Load() == 0 || writes.Load() == 0 {
			t.Fatalf("only %d reads and %d writes got the lock", reads.Load(), writes.Load())
		}
		// Every lock taken was freed (once the one-sided releases in
		// flight have landed): a read and a write by each way succeed.
		for _, in := range w.initiator {
			if err := in.rdma.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if l := binary.LittleEndian.Uint64(mem.Bytes()); l != 0 {
			t.Fatalf("lock word %d with no operation in flight", l)
		}
		for _, in := range w.initiator[:1] {
			if code, _, err := in.client.SignaledRead(ctx, rec, 1, nil); code != OK || err != nil {
				t.Fatalf("read of a free record: %v %v", code, err)
			}
			if code, err := in.client.LockedWrite(ctx, rec, recordPattern(7, data)); code != OK || err != nil {
				t.Fatalf("write after a read: %v %v", code, err)
			}
		}
		// A held lock: SignaledRead gives up with CodeLocked, both ways.
		binary.LittleEndian.PutUint64(mem.Bytes(), 1)
		in := w.initiator[0]
		if code, _, err := in.client.SignaledRead(ctx, rec, 2, nil); code != CodeLocked || err != nil {
			t.Fatalf("read of a held record: %v %v", code, err)
		}
		if code, _, err := in.rdma.SignaledRead(ctx, loc, 2, nil); code != CodeLocked || err != nil {
			t.Fatalf("rdma read of a held record: %v %v", code, err)
		}
		w.checkDirect(t, false)
	})
}

func TestSection3_3_WriteAndSeal(t *testing.T) {
	forTransports(t, func(t *testing.T, tr testTransport) {
		w := newWorld(t, tr, worldConfig{initiators: testInitiators})
		ctx := testCtx(t)
		const per, data = 40, 512
		n := testInitiators * per
		bufs := make([]Capability, n)
		for i := range bufs {
			m, _ := w.instance(t, i*(sealHeader+data), sealHeader+data)
			bufs[i] = w.create(t, SealedBufferType, m)
		}
		// The owner watches every seal while the initiators write: a seal
		// seen means its data is there.
		stop := make(chan struct{})
		var bad atomic.Int64
		watched := make(chan int)
		go func() {
			seen := make([]bool, n)
			count := 0
			for count < n {
				select {
				case <-stop:
					watched <- count
					return
				default:
				}
				for i := range seen {
					if seen[i] {
						continue
					}
					b := w.mem.Bytes()[i*(sealHeader+data):]
					if s := (*atomic.Uint64)(ptr(b)).Load(); s != 0 {
						seen[i] = true
						count++
						if s != uint64(i+1) || !bytes.Equal(b[sealHeader:sealHeader+data], recordPattern(s, data)) {
							bad.Add(1)
						}
					}
				}
			}
			watched <- count
		}()
		var wg sync.WaitGroup
		for who := range w.initiator {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in := w.initiator[who]
				for j := 0; j < per; j++ {
					i := who*per + j
					seal := uint64(i + 1)
					var code Code
					var err error
					if j%2 == 0 {
						code, err = in.client.WriteAndSeal(ctx, bufs[i], seal, recordPattern(seal, data))
					} else {
						_, loc := w.instance(t, i*(sealHeader+data), sealHeader+data)
						code, err = in.rdma.WriteAndSeal(ctx, loc, seal, recordPattern(seal, data))
					}
					if err != nil || code != OK {
						t.Errorf("write %d: %v %v", i, code, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		var got int
		select {
		case got = <-watched:
		case <-time.After(10 * time.Second):
			close(stop)
			got = <-watched
		}
		if got != n || bad.Load() != 0 {
			t.Fatalf("owner saw %d of %d seals, %d with wrong data", got, n, bad.Load())
		}
		w.checkDirect(t, tr.direct)
	})
}

func TestSection3_3_ScatterAndAccumulate(t *testing.T) {
	forTransports(t, func(t *testing.T, tr testTransport) {
		w := newWorld(t, tr, worldConfig{initiators: testInitiators})
		ctx := testCtx(t)
		const lookups, accs, rounds = 64, 16, 60
		lookup := make([]uint64, lookups)
		for i := range lookup {
			lookup[i] = uint64(i*7) % accs
		}
		mem, loc := w.instance(t, 0, accumHeader+8*(lookups+accs))
		if err := InitAccumulator(mem.Bytes(), lookup, accs); err != nil {
			t.Fatal(err)
		}
		acc := w.create(t, AccumulatorType, mem)
		want := make([]uint64, accs)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for who := range w.initiator {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewSource(int64(who)))
				in := w.initiator[who]
				local := make([]uint64, accs)
				for i := 0; i < rounds; i++ {
					pairs := make([]KeyDelta, 1+r.Intn(MaxAccumulate))
					for p := range pairs {
						pairs[p] = KeyDelta{Key: uint64(r.Intn(1000)), Delta: uint64(r.Intn(100))}
						local[lookup[pairs[p].Key%lookups]] += pairs[p].Delta
					}
					var n int
					var code Code
					var err error
					if i%2 == 0 {
						n, code, err = in.client.ScatterAndAccumulate(ctx, acc, pairs)
					} else {
						n, code, err = in.rdma.ScatterAndAccumulate(ctx, loc, lookups, accs, pairs)
					}
					if err != nil || code != OK || n != len(pairs) {
						t.Errorf("accumulate: %d %v %v", n, code, err)
						return
					}
				}
				mu.Lock()
				for i, v := range local {
					want[i] += v
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		if got := Accumulators(mem.Bytes()); !slices.Equal(got, want) {
			t.Fatalf("sums %v, want %v", got, want)
		}
		// A lookup entry naming no accumulator stops the RDMO there.
		// So does one naming the first index past the last accumulator.
		for _, bad := range []uint64{accs + 3, accs} {
			binary.LittleEndian.PutUint64(mem.Bytes()[accumHeader+8*5:], bad)
			before := Accumulators(mem.Bytes())
			n, code, err := w.initiator[0].client.ScatterAndAccumulate(ctx, acc, []KeyDelta{{1, 1}, {5, 1}, {2, 1}})
			if err != nil || code != CodeBadIndex || n != 1 {
				t.Fatalf("lookup entry %d of %d accumulators: %d %v %v", bad, accs, n, code, err)
			}
			if after := Accumulators(mem.Bytes()); after[lookup[1]] != before[lookup[1]]+1 || !slices.Equal(after[:lookup[1]], before[:lookup[1]]) {
				t.Fatalf("lookup entry %d: accumulators %v after %v, want only the first pair applied", bad, after, before)
			}
		}
		w.checkDirect(t, tr.direct)
	})
}
