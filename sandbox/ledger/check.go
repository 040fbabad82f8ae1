package ledger

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// Audit is what Check found in one ledger: whether its sequence is whole,
// and the longest time it went without an acknowledgement while observed.
//
// A writer numbers its records one by one and acknowledges only those whose
// fsync returned (Run), so a missing number is a record whose write, fsync or
// open failed; a number acknowledged twice with different times, a number
// below one already seen, or a line that does not parse is a ledger no single
// writer appended.
type Audit struct {
	// Acks are the lines that parse, in file order (what Verify compares).
	Acks []Ack
	// First and Last are the lowest and highest sequence numbers acknowledged.
	First, Last uint64
	// Missing counts the numbers between First and Last never acknowledged;
	// FirstMissing is the lowest.
	Missing      uint64
	FirstMissing uint64
	// Garbled counts the lines that do not parse (a last line without its
	// newline excepted: an append cut short); GarbledLine is the first one's
	// line number.
	Garbled     int
	GarbledLine int
	// Conflicting counts the numbers acknowledged again with another time;
	// Repeated the lines that repeat an earlier one exactly.
	Conflicting      int
	FirstConflicting uint64
	Repeated         int
	// OutOfOrder counts the lines whose number is below a number before them
	// (that is not a repetition); FirstOutOfOrder is the first such number.
	OutOfOrder      int
	FirstOutOfOrder uint64

	// From and To bound the observation: Check measures the stall within them.
	From, To time.Time
	// Observed counts the acknowledgements within [From, To].
	Observed int
	// Stall is the longest time within [From, To] without an
	// acknowledgement: between two consecutive ones, from From to the first,
	// or from the last to To (the tail, a writer that stopped for good).
	// StallFrom is when it began.
	Stall     time.Duration
	StallFrom time.Time
}

// Gapless reports whether the ledger holds every number from First to Last
// once, in order, nothing garbled: a writer none of whose records failed. An
// empty ledger is not gapless: its writer acknowledged nothing.
func (a Audit) Gapless() bool {
	return len(a.Acks) > 0 && a.Missing == 0 && a.Garbled == 0 && a.Conflicting == 0 && a.OutOfOrder == 0
}

// AckedBetween counts the acknowledgements strictly between from and to.
func (a Audit) AckedBetween(from, to time.Time) int {
	n := 0
	for _, k := range a.Acks {
		if k.Time.After(from) && k.Time.Before(to) {
			n++
		}
	}
	return n
}

// String is a one-line summary for a test's log: the sequence, what breaks
// it, and the longest stall.
func (a Audit) String() string {
	var b strings.Builder
	if len(a.Acks) == 0 {
		b.WriteString("ledger: nothing acknowledged, NOT GAPLESS")
	} else {
		fmt.Fprintf(&b, "ledger: %d acknowledged, seq %d–%d", len(a.Acks), a.First, a.Last)
		if a.Gapless() {
			b.WriteString(", gapless")
		} else {
			b.WriteString(", NOT GAPLESS:")
		}
	}
	if a.Missing > 0 {
		fmt.Fprintf(&b, " %d missing (first seq %d: its write failed)", a.Missing, a.FirstMissing)
	}
	if a.Garbled > 0 {
		fmt.Fprintf(&b, " %d garbled lines (first line %d)", a.Garbled, a.GarbledLine)
	}
	if a.Conflicting > 0 {
		fmt.Fprintf(&b, " %d acknowledged twice with different times (first seq %d)", a.Conflicting, a.FirstConflicting)
	}
	if a.OutOfOrder > 0 {
		fmt.Fprintf(&b, " %d out of order (first seq %d)", a.OutOfOrder, a.FirstOutOfOrder)
	}
	if a.Repeated > 0 {
		fmt.Fprintf(&b, "; %d lines repeated exactly", a.Repeated)
	}
	fmt.Fprintf(&b, "; %d observed in %.1fs, longest stall %.2fs", a.Observed, a.To.Sub(a.From).Seconds(), a.Stall.Seconds())
	if !a.StallFrom.IsZero() {
		fmt.Fprintf(&b, " from %.1fs", a.StallFrom.Sub(a.From).Seconds())
	}
	return b.String()
}

// Check audits the ledger data (a ledger file's content) observed from from
// to to (to after from): its sequence, and its longest stall in that window.
// Acknowledgements outside the window count for the sequence only.
func Check(data []byte, from, to time.Time) Audit {
	a := Audit{From: from, To: to}
	lines := bytes.SplitAfter(data, []byte("\n"))
	seen := make(map[uint64]time.Time, len(lines))
	for i, line := range lines {
		if !bytes.HasSuffix(line, []byte("\n")) {
			break // the last piece: empty, or an append cut short
		}
		k, err := parseAck(string(line))
		if err != nil {
			a.Garbled++
			if a.GarbledLine == 0 {
				a.GarbledLine = i + 1
			}
			continue
		}
		a.addAck(k, seen)
	}
	a.countMissing(seen)
	a.measureStall()
	return a
}

// CheckFile is Check of the ledger file at path; a file that does not exist
// is an empty ledger. Only a file it cannot read is an error, returned with
// the audit of an empty ledger (stalled for the whole window).
func CheckFile(path string, from, to time.Time) (Audit, error) {
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return Check(nil, from, to), err
	}
	return Check(data, from, to), nil
}

// addAck takes one parsed line: a repetition, a conflict, a number out of
// order, or the next acknowledgement.
func (a *Audit) addAck(k Ack, seen map[uint64]time.Time) {
	if t, ok := seen[k.Seq]; ok {
		if t.Equal(k.Time) {
			a.Repeated++
			return
		}
		a.Conflicting++
		if a.Conflicting == 1 {
			a.FirstConflicting = k.Seq
		}
		return
	}
	if len(seen) > 0 && k.Seq < a.Last {
		a.OutOfOrder++
		if a.OutOfOrder == 1 {
			a.FirstOutOfOrder = k.Seq
		}
	}
	if len(seen) == 0 || k.Seq < a.First {
		a.First = k.Seq
	}
	a.Last = max(a.Last, k.Seq)
	seen[k.Seq] = k.Time
	a.Acks = append(a.Acks, k)
}

// countMissing counts the numbers from First to Last not in seen.
func (a *Audit) countMissing(seen map[uint64]time.Time) {
	if len(seen) == 0 {
		return
	}
	a.Missing = a.Last - a.First + 1 - uint64(len(seen))
	if a.Missing == 0 {
		return
	}
	for s := a.First; s <= a.Last; s++ {
		if _, ok := seen[s]; !ok {
			a.FirstMissing = s
			return
		}
	}
}

// measureStall finds the longest time without an acknowledgement within
// [From, To], the tail included, in time order (a ledger out of order is
// measured by its times, as a reader would have seen them arrive).
func (a *Audit) measureStall() {
	var times []time.Time
	for _, k := range a.Acks {
		if !k.Time.Before(a.From) && !k.Time.After(a.To) {
			times = append(times, k.Time)
		}
	}
	a.Observed = len(times)
	slices.SortFunc(times, func(x, y time.Time) int { return x.Compare(y) })
	prev := a.From
	for _, t := range append(times, a.To) {
		if d := t.Sub(prev); d > a.Stall {
			a.Stall, a.StallFrom = d, prev
		}
		prev = t
	}
}
