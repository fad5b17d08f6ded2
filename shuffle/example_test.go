package shuffle_test

import (
	"context"
	"fmt"
	"sort"

	"github.com/seriema-go/seriema/dtutils"
	"github.com/seriema-go/seriema/shuffle"
)

// Example repartitions words between two processes' endpoints (here two
// dtutils Processes of one program over loop; a dsfabric job wires them
// with shuffle.Wiring instead): one SHUFFLE operator sends each word to the
// receive endpoint its first letter picks, and each RECEIVE operator reads
// until every source is depleted.
func Example() {
	ctx := context.Background()
	fabric := dtutils.NewLoopFabric()
	var senders []*shuffle.Sender
	var receivers []*shuffle.Receiver
	var provs []dtutils.Provider
	for rank := uint32(0); rank < 2; rank++ {
		proc, _ := dtutils.NewProcess(dtutils.DefaultProcessConfig(rank))
		defer proc.Close()
		provs = append(provs, fabric.NewProvider(proc))
		s, _ := shuffle.NewSender(proc, shuffle.Config{BufferBytes: 256, Depth: 2}, 2, 1)
		r, _ := shuffle.NewReceiver(proc, shuffle.Config{BufferBytes: 256, Depth: 2}, 2)
		senders, receivers = append(senders, s), append(receivers, r)
	}
	// Wire every sender to every receiver: a connected pair of queue
	// pairs each, and the two descriptions exchanged.
	for a, s := range senders {
		for b, r := range receivers {
			qa, _ := provs[a].NewQueuePair()
			qb, _ := provs[b].NewQueuePair()
			qa.Connect(qb.Endpoint())
			qb.Connect(qa.Endpoint())
			back, err := s.Attach(b, qa, r.Offer(a))
			if err != nil {
				panic(err)
			}
			if err := r.Attach(a, qb, back); err != nil {
				panic(err)
			}
		}
	}
	words := []string{"apple", "banana", "avocado", "blueberry", "apricot", "cherry"}
	closed := make(chan error, len(senders))
	for a, s := range senders {
		sh, _ := s.NewShuffle(shuffle.Repartition(2))
		for i, w := range words {
			if i%2 == a { // each process sends half of the words
				sh.Put(ctx, int(w[0])%2, []byte(w)) // 'a', 'c' → 1; 'b' → 0
			}
		}
		go func() { closed <- sh.Close(ctx) }() // Depleted; returns once all is consumed
	}
	for b, r := range receivers {
		var got []string
		r.NewReceive().Each(ctx, func(rec []byte) error {
			got = append(got, string(rec))
			return nil
		})
		sort.Strings(got)
		fmt.Println(b, got)
	}
	for range senders {
		<-closed // before the processes close under them
	}
	// Output:
	// 0 [banana blueberry]
	// 1 [apple apricot avocado cherry]
}
