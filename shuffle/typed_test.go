package shuffle

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
)

type lineItem struct {
	Order uint64
	Price uint32
}

var lineItems = CodecFuncs[lineItem]{
	AppendFunc: func(dst []byte, v lineItem) []byte {
		dst = binary.LittleEndian.AppendUint64(dst, v.Order)
		return binary.LittleEndian.AppendUint32(dst, v.Price)
	},
	DecodeFunc: func(rec []byte) (lineItem, error) {
		if len(rec) != 12 {
			return lineItem{}, fmt.Errorf("a line item is 12 bytes, not %d", len(rec))
		}
		return lineItem{binary.LittleEndian.Uint64(rec), binary.LittleEndian.Uint32(rec[8:])}, nil
	},
}

// TestTypedShuffle: values go through the typed operators to the
// endpoint their partitioner picks, every one exactly once; a record the
// codec cannot read is ErrBadBuffer, and the stream goes on after it: Next
// (endpoint 0) reports it and returns the next value; Each (endpoint 1)
// calls fn on every value and reports it at the end.
func TestTypedShuffle(t *testing.T) {
	for _, tr := range transports[:2] {
		t.Run(tr.name, func(t *testing.T) {
			j := newJob(t, tr.make, 2, 1, 1, Config{BufferBytes: 256, Depth: 4})
			ctx := testCtx(t)
			const n = 1000
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			sums := make([]uint64, 2)
			counts := make([]int, 2)
			for p := 0; p < 2; p++ {
				wg.Add(2)
				go func() {
					defer wg.Done()
					sh, err := j.senders[p][0].NewShuffle(Repartition(2))
					if err != nil {
						errs <- err
						return
					}
					// One record no line item decodes from, to the other endpoint.
					if err := sh.Put(ctx, 1-p, []byte("bad")); err != nil {
						errs <- err
					}
					ts := NewTypedShuffle(sh, lineItems, func(v lineItem) int { return int(v.Order % 2) })
					for i := 0; i < n; i++ {
						if err := ts.Put(ctx, lineItem{Order: uint64(p*n + i), Price: uint32(i)}); err != nil {
							errs <- err
							return
						}
					}
					errs <- ts.Close(ctx)
				}()
				go func() {
					defer wg.Done()
					keep := func(v lineItem) error {
						if int(v.Order%2) != p || uint64(v.Price) != v.Order%n {
							return fmt.Errorf("endpoint %d got %+v", p, v)
						}
						sums[p] += v.Order
						counts[p]++
						return nil
					}
					bad := 0
					var eachErr error
					if p == 1 { // Each: every value, then the undecodable record's error
						err := NewTypedReceive(j.receivers[p][0].NewReceive(), lineItems).Each(ctx, keep)
						if !errors.Is(err, ErrBadBuffer) {
							// Drained below (the senders wait for their
							// records to be consumed), then reported.
							eachErr = fmt.Errorf("Each over an undecodable record: %v, want ErrBadBuffer", err)
						}
						bad++
					}
					tr := NewTypedReceive(j.receivers[p][0].NewReceive(), lineItems)
					defer tr.Close()
					for {
						v, err := tr.Next(ctx)
						if err == io.EOF {
							break
						}
						if errors.Is(err, ErrBadBuffer) {
							bad++
							continue
						}
						if err != nil {
							errs <- err
							return
						}
						if err := keep(v); err != nil {
							errs <- err
							return
						}
					}
					if eachErr != nil {
						errs <- eachErr
						return
					}
					if bad != 1 {
						errs <- fmt.Errorf("endpoint %d: %d undecodable records, want 1", p, bad)
						return
					}
					errs <- nil
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			for p := 0; p < 2; p++ {
				var want uint64
				for k := uint64(0); k < 2*n; k++ {
					if int(k%2) == p {
						want += k
					}
				}
				if counts[p] != n || sums[p] != want {
					t.Errorf("endpoint %d: %d values summing to %d, want %d summing to %d", p, counts[p], sums[p], n, want)
				}
			}
		})
	}
}
