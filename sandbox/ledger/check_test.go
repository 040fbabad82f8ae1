package ledger

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sec is a time s seconds after the epoch, for ledgers written by hand.
func sec(s float64) time.Time { return time.Unix(0, int64(s*float64(time.Second))) }

// ackLines is a ledger of "SEQ@SECONDS" pairs, one line each.
func ackLines(pairs ...string) string {
	var b []byte
	for _, p := range pairs {
		seq, s, _ := strings.Cut(p, "@")
		n, err1 := strconv.ParseUint(seq, 10, 64)
		f, err2 := strconv.ParseFloat(s, 64)
		if err1 != nil || err2 != nil {
			panic("ackLines: bad pair " + p)
		}
		b = append(b, Ack{Seq: n, Time: sec(f)}.Line()...)
	}
	return string(b)
}

// TestCheck_Cases is the specification of Check: what makes a ledger
// gapless, and how the longest stall is measured, tail included.
func TestCheck_Cases(t *testing.T) {
	type want struct {
		gapless               bool
		acks                  int
		missing, firstMissing uint64
		garbled, garbledLine  int
		conflicting, repeated int
		outOfOrder            int
		firstOutOfOrder       uint64
		observed              int
		stall, stallFrom      float64 // seconds
		summary               string  // a substring of String()
	}
	for _, c := range []struct {
		name     string
		data     string
		from, to float64
		want     want
	}{
		{name: "whole, longest stall between two", data: ackLines("1@1", "2@2", "3@6", "4@7"), from: 0, to: 8,
			want: want{gapless: true, acks: 4, observed: 4, stall: 4, stallFrom: 2, summary: "seq 1–4, gapless"}},
		{name: "whole, longest stall is the tail", data: ackLines("1@1", "2@2"), from: 0, to: 10,
			want: want{gapless: true, acks: 2, observed: 2, stall: 8, stallFrom: 2, summary: "longest stall 8.00s from 2.0s"}},
		{name: "whole, longest stall before the first", data: ackLines("5@7", "6@8"), from: 1, to: 8.5,
			want: want{gapless: true, acks: 2, observed: 2, stall: 6, stallFrom: 1, summary: "seq 5–6, gapless"}},
		{name: "a missing sequence number", data: ackLines("1@1", "2@2", "4@3", "5@4"), from: 0, to: 4,
			want: want{acks: 4, missing: 1, firstMissing: 3, observed: 4, stall: 1, stallFrom: 0, summary: "1 missing (first seq 3"}},
		{name: "several missing", data: ackLines("3@1", "4@2", "9@3"), from: 0, to: 3,
			want: want{acks: 3, missing: 4, firstMissing: 5, observed: 3, stall: 1, stallFrom: 0, summary: "4 missing"}},
		{name: "a garbled line", data: ackLines("1@1") + "2 x\n" + ackLines("3@3"), from: 0, to: 3,
			want: want{acks: 2, missing: 1, firstMissing: 2, garbled: 1, garbledLine: 2, observed: 2, stall: 2, stallFrom: 1,
				summary: "1 garbled lines (first line 2)"}},
		{name: "a zeroed block", data: ackLines("1@1", "2@2") + "\x00\x00\x00\n", from: 0, to: 2,
			want: want{acks: 2, garbled: 1, garbledLine: 3, observed: 2, stall: 1, stallFrom: 0, summary: "NOT GAPLESS"}},
		{name: "an append cut short is not garbled", data: ackLines("1@1", "2@2") + "3 30", from: 0, to: 2,
			want: want{gapless: true, acks: 2, observed: 2, stall: 1, stallFrom: 0, summary: "gapless"}},
		{name: "a duplicate with another time", data: ackLines("1@1", "2@2", "2@3", "3@4"), from: 0, to: 4,
			want: want{acks: 3, conflicting: 1, observed: 3, stall: 2, stallFrom: 2, summary: "1 acknowledged twice with different times (first seq 2)"}},
		{name: "a line repeated exactly", data: ackLines("1@1", "2@2", "2@2", "3@3"), from: 0, to: 3,
			want: want{gapless: true, acks: 3, repeated: 1, observed: 3, stall: 1, stallFrom: 0, summary: "1 lines repeated exactly"}},
		{name: "records out of order", data: ackLines("1@1", "3@3", "2@2", "4@4"), from: 0, to: 4,
			want: want{acks: 4, outOfOrder: 1, firstOutOfOrder: 2, observed: 4, stall: 1, stallFrom: 0, summary: "1 out of order (first seq 2)"}},
		{name: "an empty ledger", data: "", from: 0, to: 5,
			want: want{stall: 5, stallFrom: 0, summary: "nothing acknowledged, NOT GAPLESS; 0 observed in 5.0s, longest stall 5.00s"}},
		{name: "only garbage", data: "hello\n", from: 0, to: 5,
			want: want{garbled: 1, garbledLine: 1, stall: 5, stallFrom: 0, summary: "nothing acknowledged"}},
		{name: "acknowledgements outside the window count for the sequence only", data: ackLines("1@1", "2@2", "4@20"), from: 5, to: 10,
			want: want{acks: 3, missing: 1, firstMissing: 3, stall: 5, stallFrom: 5, summary: "0 observed in 5.0s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := Check([]byte(c.data), sec(c.from), sec(c.to))
			got := want{gapless: a.Gapless(), acks: len(a.Acks), missing: a.Missing, firstMissing: a.FirstMissing,
				garbled: a.Garbled, garbledLine: a.GarbledLine, conflicting: a.Conflicting, repeated: a.Repeated,
				outOfOrder: a.OutOfOrder, firstOutOfOrder: a.FirstOutOfOrder, observed: a.Observed,
				stall: a.Stall.Seconds(), stallFrom: a.StallFrom.Sub(sec(0)).Seconds(), summary: c.want.summary}
			if got != c.want {
				t.Errorf("Check(%q):\n got %+v\nwant %+v", c.data, got, c.want)
			}
			if s := a.String(); !strings.Contains(s, c.want.summary) || strings.Contains(s, "\n") {
				t.Errorf("String() = %q, want one line containing %q", s, c.want.summary)
			}
		})
	}
}

func TestCheckFile_MissingIsEmpty(t *testing.T) {
	dir := t.TempDir()
	a, err := CheckFile(filepath.Join(dir, "none"), sec(0), sec(3))
	if err != nil || a.Gapless() || a.Stall != 3*time.Second {
		t.Errorf("CheckFile(missing) = %s, %v; want an empty ledger stalled 3s, no error", a, err)
	}
	p := filepath.Join(dir, "l")
	must(t, os.WriteFile(p, []byte(ackLines("1@1", "2@2")), 0o644))
	a, err = CheckFile(p, sec(0), sec(3))
	if err != nil || !a.Gapless() || a.Last != 2 {
		t.Errorf("CheckFile = %s, %v; want seq 1–2 gapless", a, err)
	}
	if a, err := CheckFile(dir, sec(0), sec(3)); err == nil || a.Gapless() || a.Stall != 3*time.Second {
		t.Errorf("CheckFile(a directory) = %s, %v; want the read's error and an empty ledger stalled 3s", a, err)
	}
}

func TestAudit_AckedBetween(t *testing.T) {
	a := Check([]byte(ackLines("1@1", "2@2", "3@3", "4@4")), sec(0), sec(5))
	if n := a.AckedBetween(sec(1), sec(4)); n != 2 {
		t.Errorf("AckedBetween(1s, 4s) = %d, want 2 (strictly between)", n)
	}
}
