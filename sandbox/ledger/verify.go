package ledger

import (
	"fmt"
	"slices"
	"time"
)

// Span is a time during which the datapath had a node fenced on a volume: from
// the fence to the node's next grant (an open span has a zero To).
type Span struct {
	From, To time.Time
	// Epoch is the volume's epoch the fence moved it to.
	Epoch uint64
}

// contains reports whether t is inside the span: after its start and, for a
// closed span, before its end.
func (s Span) contains(t time.Time) bool {
	return t.After(s.From) && (s.To.IsZero() || t.Before(s.To))
}

// Pod is one writer's identity and what the checks compare: its ledger, the
// records found in its file on the volume, and the spans during which the
// datapath had its node fenced on that volume.
type Pod struct {
	UID, Node string
	Acks      []Ack
	Found     Records
	Fenced    []Span
}

// Result is Verify's finding for one pod. Lost and AfterFence are violations.
type Result struct {
	UID, Node string
	Acked     int
	Found     int
	Garbled   int
	// Lost: acknowledged records missing from the volume (the first
	// maxListed; LostCount counts them all).
	Lost      []Ack
	LostCount int
	// AfterFence: records on the volume that the pod's node wrote while the
	// datapath had it fenced (their time is inside a fence span).
	AfterFence      []Record
	AfterFenceCount int
	// Foreign: records in the pod's file that name another pod or node.
	Foreign      []Record
	ForeignCount int
}

// OK reports whether the result holds no violation.
func (r Result) OK() bool { return r.LostCount == 0 && r.AfterFenceCount == 0 && r.ForeignCount == 0 }

// maxListed bounds the violations a Result lists, so that a bad run stays readable.
const maxListed = 20

// String summarises r, with the first violations.
func (r Result) String() string {
	s := fmt.Sprintf("pod %s on %s: %d acknowledged, %d found, %d garbled lines", r.UID, r.Node, r.Acked, r.Found, r.Garbled)
	if r.LostCount > 0 {
		s += fmt.Sprintf("; LOST %d acknowledged records, first seq %d (acked at %s)", r.LostCount, r.Lost[0].Seq,
			r.Lost[0].Time.UTC().Format(time.RFC3339Nano))
	}
	if r.AfterFenceCount > 0 {
		s += fmt.Sprintf("; %d records written AFTER THE FENCE, first seq %d at %s", r.AfterFenceCount, r.AfterFence[0].Seq,
			r.AfterFence[0].Time.UTC().Format(time.RFC3339Nano))
	}
	if r.ForeignCount > 0 {
		s += fmt.Sprintf("; %d FOREIGN records, first %+v", r.ForeignCount, r.Foreign[0])
	}
	return s
}

// Verify checks one pod: every acknowledged record is on the volume with the
// same time, and no record of the pod's node falls in a span during which the
// datapath had that node fenced.
func Verify(p Pod) Result {
	res := Result{UID: p.UID, Node: p.Node, Acked: len(p.Acks), Found: len(p.Found.Records), Garbled: p.Found.Garbled}
	have := make(map[uint64]time.Time, len(p.Found.Records))
	for _, r := range p.Found.Records {
		if r.PodUID != p.UID || r.Node != p.Node {
			res.ForeignCount++
			if len(res.Foreign) < maxListed {
				res.Foreign = append(res.Foreign, r)
			}
			continue
		}
		have[r.Seq] = r.Time
		if slices.ContainsFunc(p.Fenced, func(s Span) bool { return s.contains(r.Time) }) {
			res.AfterFenceCount++
			if len(res.AfterFence) < maxListed {
				res.AfterFence = append(res.AfterFence, r)
			}
		}
	}
	for _, a := range p.Acks {
		if t, ok := have[a.Seq]; !ok || !t.Equal(a.Time) {
			res.LostCount++
			if len(res.Lost) < maxListed {
				res.Lost = append(res.Lost, a)
			}
		}
	}
	return res
}
