package dtutils_test

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
)

// Two processes joined by a queue pair (here over loop, both in this one;
// NewSHM and NewTCP give the same operations between real processes). The
// initiator writes a sealed record into the target's registered memory
// through a Transmitter, which signals one operation in k by itself, then
// sends a message into a receive the target posted.
func Example() {
	fabric := dtutils.NewLoopFabric()
	target, _ := dtutils.NewProcess(dtutils.DefaultProcessConfig(0))
	defer target.Close()
	initiator, _ := dtutils.NewProcess(dtutils.DefaultProcessConfig(1))
	defer initiator.Close()
	qa, _ := fabric.NewProvider(initiator).NewQueuePair()
	qb, _ := fabric.NewProvider(target).NewQueuePair()
	// Endpoints are plain bytes: between machines they travel through
	// whatever bootstrap the program has (dsfabric's coordinator).
	qa.Connect(qb.Endpoint())
	qb.Connect(qa.Endpoint())

	// The target registers memory and hands out a locator for 16 bytes of
	// it; the locator (region, offset, length, key) is all the initiator
	// needs, and a wrong key or an access out of range is refused.
	inbox, _ := target.Registry().NewRegion(4096, alloc.RegionConfig{Name: "inbox"})
	slot, _ := inbox.Locator(0, 16)

	// The initiator writes from its own registered memory.
	tx, _ := dtutils.NewTransmitter(qa, initiator.Config().MaxUnsignaled, dtutils.TransmitterConfig{})
	out, _ := initiator.Registry().NewRegion(4096, alloc.RegionConfig{Name: "out"})
	rec, _ := out.Memory(0, 16)
	copy(rec.Bytes(), "payload!")
	binary.LittleEndian.PutUint64(rec.Bytes()[8:], 1) // the seal: the last word lands last
	if err := tx.Write(rec, slot); err != nil {
		fmt.Println(err)
	}
	// Flush: every operation posted before it has completed.
	if err := tx.Flush(context.Background()); err != nil {
		fmt.Println(err)
	}
	b := inbox.Bytes()
	fmt.Printf("target reads %q, seal %d\n", b[:8], binary.LittleEndian.Uint64(b[8:16]))

	// Send needs a receive posted at the target first.
	recv, _ := inbox.Memory(64, 64)
	target.PostRecv(recv, 42)
	msg, _ := out.Memory(64, 5)
	copy(msg.Bytes(), "hello")
	if err := tx.Send(msg, 7); err != nil {
		fmt.Println(err)
	}
	var cs [4]dtutils.Completion
	n := target.PollRecv(cs[:])
	c := cs[0]
	fmt.Printf("%d completion: wrid %d, %d bytes %q, imm %d, from rank %d\n", n, c.WRID, c.Bytes, recv.Bytes()[:c.Bytes], c.Imm, c.Src)

	// No receive is posted now: the send is refused and nothing is lost.
	fmt.Println(tx.Send(msg, 8))
	// Output:
	// target reads "payload!", seal 1
	// 1 completion: wrid 42, 5 bytes "hello", imm 7, from rank 1
	// dtutils: receiver not ready (no receive posted): 5-byte send
}
