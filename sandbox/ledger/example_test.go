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
