package ledger_test

import (
	"fmt"
	"time"

	"github.com/vigil-storage/vigil/sandbox/ledger"
)

// Verify compares what a writer acknowledged with what its volume holds, and
// flags a record its node wrote while the datapath had it fenced.
func ExampleVerify() {
	fence := time.Unix(100, 0)
	before := ledger.Record{PodUID: "uid-1", Node: "node-1", Seq: 1, Time: fence.Add(-time.Second)}
	zombie := ledger.Record{PodUID: "uid-1", Node: "node-1", Seq: 2, Time: fence.Add(time.Second)}
	res := ledger.Verify(ledger.Pod{
		UID: "uid-1", Node: "node-1",
		Acks:   []ledger.Ack{{Seq: 1, Time: before.Time}},
		Found:  ledger.ParseRecords(append(before.Line(), zombie.Line()...)),
		Fenced: []ledger.Span{{From: fence, Epoch: 7}},
	})
	fmt.Println(res.OK(), res.LostCount, res.AfterFenceCount)
	// Output: false 0 1
}

// Check judges a writer's ledger: a missing sequence number is a record whose
// write or fsync failed, and the longest stall counts the tail, from the last
// acknowledgement to the end of the observation.
func ExampleCheck() {
	start := time.Unix(100, 0)
	var data []byte
	for _, a := range []ledger.Ack{{Seq: 1, Time: start.Add(time.Second)}, {Seq: 2, Time: start.Add(2 * time.Second)},
		{Seq: 4, Time: start.Add(3 * time.Second)}} {
		data = append(data, a.Line()...)
	}
	a := ledger.Check(data, start, start.Add(10*time.Second))
	fmt.Println(a.Gapless())
	fmt.Println(a)
	// Output:
	// false
	// ledger: 3 acknowledged, seq 1–4, NOT GAPLESS: 1 missing (first seq 3: its write failed); 3 observed in 10.0s, longest stall 7.00s from 3.0s
}
