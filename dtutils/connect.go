package dtutils

import (
	"errors"
	"fmt"
	"sync"
)

// ConnectAll connects qps[i] to remote[i] (a peer queue pair's Endpoint),
// all at once: the far sides connect theirs at the same time, and a
// Connect may wait for its peer's, so connecting them one by one could
// deadlock two processes wiring to each other.
func ConnectAll(qps []QueuePair, remote [][]byte) error {
	if len(qps) != len(remote) {
		return fmt.Errorf("%w: ConnectAll got %d queue pairs and %d remote endpoints (it needs one per queue pair)", ErrBadEndpoint, len(qps), len(remote))
	}
	errs := make([]error, len(qps))
	var wg sync.WaitGroup
	for i := range qps {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = qps[i].Connect(remote[i]) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ConnectPair makes a queue pair on a and one on b and connects them to
// each other (the two ends of one connection, as tests and single-program
// setups want them).
func ConnectPair(a, b Provider) (QueuePair, QueuePair, error) {
	qa, err := a.NewQueuePair()
	if err != nil {
		return nil, nil, err
	}
	qb, err := b.NewQueuePair()
	if err != nil {
		qa.Close()
		return nil, nil, err
	}
	if err := ConnectAll([]QueuePair{qa, qb}, [][]byte{qb.Endpoint(), qa.Endpoint()}); err != nil {
		qa.Close()
		qb.Close()
		return nil, nil, err
	}
	return qa, qb, nil
}
