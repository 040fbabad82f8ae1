package ledger

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRecord_Line_RoundTrip(t *testing.T) {
	r := Record{PodUID: "0b6c-uid", Node: "node-2", Seq: 42, Time: time.Unix(1700000000, 123456789)}
	line := r.Line()
	if !bytes.HasSuffix(line, []byte("\n")) {
		t.Fatalf("line %q lacks its newline", line)
	}
	got, err := ParseRecord(bytes.TrimSuffix(line, []byte("\n")))
	if err != nil || got.PodUID != r.PodUID || got.Node != r.Node || got.Seq != r.Seq || !got.Time.Equal(r.Time) {
		t.Errorf("ParseRecord(%q) = %+v, %v; want %+v", line, got, err, r)
	}
}

func TestParseRecord_Bad(t *testing.T) {
	good := string(bytes.TrimSuffix(Record{PodUID: "u", Node: "n", Seq: 1, Time: time.Unix(0, 5)}.Line(), []byte("\n")))
	for name, line := range map[string]string{
		"empty":         "",
		"torn":          good[:len(good)-3],
		"flipped digit": strings.Replace(good, " 1 ", " 7 ", 1),
		"magic":         "vr2" + good[3:],
		"extra field":   good + " x",
		"bad crc":       good[:len(good)-8] + "zzzzzzzz",
	} {
		if _, err := ParseRecord([]byte(line)); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: ParseRecord(%q) = %v, want ErrBadRecord", name, line, err)
		}
	}
}

func TestParseRecords_GarbledAndZeroed(t *testing.T) {
	var data []byte
	for i := uint64(1); i <= 3; i++ {
		data = append(data, Record{PodUID: "u", Node: "n", Seq: i, Time: time.Unix(0, int64(i))}.Line()...)
	}
	tail := Record{PodUID: "u", Node: "n", Seq: 4, Time: time.Unix(0, 4)}.Line()
	data = append(data, tail[:10]...)          // a write cut by a power cut
	data = append(data, make([]byte, 4096)...) // a block left zeroed
	data = append(data, Record{PodUID: "u", Node: "n", Seq: 5, Time: time.Unix(0, 5)}.Line()...)
	got := ParseRecords(data)
	if len(got.Records) != 4 || got.Garbled != 1 || got.Records[3].Seq != 5 {
		t.Errorf("ParseRecords = %d records (last %+v), %d garbled; want 4 (last seq 5), 1 garbled",
			len(got.Records), got.Records[len(got.Records)-1], got.Garbled)
	}
}

func TestReadLedger_PartialLastLineAndBad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "l")
	must(t, os.WriteFile(p, []byte("1 10\n2 20\n3 3"), 0o644))
	acks, err := ReadLedger(p)
	if err != nil || len(acks) != 2 || acks[1].Seq != 2 || acks[1].Time.UnixNano() != 20 {
		t.Errorf("ReadLedger = %+v, %v; want seqs 1, 2 (the unterminated 3 ignored)", acks, err)
	}
	must(t, os.WriteFile(p, []byte("1 10\nx 20\n"), 0o644))
	if _, err := ReadLedger(p); !errors.Is(err, ErrBadRecord) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("ReadLedger(bad line 2) = %v, want ErrBadRecord naming line 2", err)
	}
}

func at(ns int64) time.Time { return time.Unix(0, ns) }

func TestVerify_Cases(t *testing.T) {
	rec := func(seq uint64, ns int64) Record { return Record{PodUID: "u", Node: "n", Seq: seq, Time: at(ns)} }
	acks := []Ack{{1, at(10)}, {2, at(20)}, {3, at(30)}}
	for _, c := range []struct {
		name                 string
		found                []Record
		fenced               []Span
		lost, after, foreign int
	}{
		{"all there", []Record{rec(1, 10), rec(2, 20), rec(3, 30), rec(4, 40)}, nil, 0, 0, 0},
		{"one lost", []Record{rec(1, 10), rec(3, 30)}, nil, 1, 0, 0},
		{"same seq, other time", []Record{rec(1, 10), rec(2, 21), rec(3, 30)}, nil, 1, 0, 0},
		{"unacked after fence", []Record{rec(1, 10), rec(2, 20), rec(3, 30), rec(4, 40)}, []Span{{From: at(35)}}, 0, 1, 0},
		{"before a closed span", []Record{rec(1, 10), rec(2, 20), rec(3, 30), rec(4, 40)}, []Span{{From: at(31), To: at(39)}}, 0, 0, 0},
		{"inside a closed span", []Record{rec(1, 10), rec(2, 20), rec(3, 30), rec(4, 35)}, []Span{{From: at(31), To: at(39)}}, 0, 1, 0},
		{"foreign", []Record{rec(1, 10), rec(2, 20), rec(3, 30), {PodUID: "u", Node: "other", Seq: 9, Time: at(90)}}, nil, 0, 0, 1},
	} {
		r := Verify(Pod{UID: "u", Node: "n", Acks: acks, Found: Records{Records: c.found}, Fenced: c.fenced})
		if r.LostCount != c.lost || r.AfterFenceCount != c.after || r.ForeignCount != c.foreign || r.OK() != (c.lost+c.after+c.foreign == 0) {
			t.Errorf("%s: %s; want lost %d, after fence %d, foreign %d", c.name, r, c.lost, c.after, c.foreign)
		}
	}
}

func TestRun_AcksOnlyWhatIsOnDisk(t *testing.T) {
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	ledgerPath := filepath.Join(dir, "ledger")
	var logs atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Dir: vol, PodUID: "u", Node: "n", Ledger: ledgerPath, Interval: 5 * time.Millisecond,
			RetryAfter: 10 * time.Millisecond, Logf: func(string, ...any) { logs.Add(1) }})
	}()
	// The volume directory does not exist yet: nothing can be acknowledged.
	waitFor(t, func() bool { return logs.Load() > 0 })
	if acks, _ := ReadLedger(ledgerPath); len(acks) != 0 {
		t.Fatalf("acknowledged %d records while the volume was missing", len(acks))
	}
	must(t, os.Mkdir(vol, 0o755))
	waitFor(t, func() bool { acks, _ := ReadLedger(ledgerPath); return len(acks) >= 5 })
	cancel()
	must(t, <-done)
	acks, err := ReadLedger(ledgerPath)
	must(t, err)
	found, err := ReadRecords(filepath.Join(vol, RecordsFile("u")))
	must(t, err)
	if r := Verify(Pod{UID: "u", Node: "n", Acks: acks, Found: found}); !r.OK() || acks[0].Seq == 1 {
		t.Errorf("%s (first acked seq %d: the failed attempts must have used up numbers)", r, acks[0].Seq)
	}
	// A second run continues the sequence.
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() {
		done <- Run(ctx2, Config{Dir: vol, PodUID: "u", Node: "n", Ledger: ledgerPath, Interval: 5 * time.Millisecond})
	}()
	waitFor(t, func() bool { more, _ := ReadLedger(ledgerPath); return len(more) > len(acks) })
	cancel2()
	must(t, <-done)
	more, err := ReadLedger(ledgerPath)
	must(t, err)
	if more[len(acks)].Seq != acks[len(acks)-1].Seq+1 {
		t.Errorf("second run started at seq %d, want %d", more[len(acks)].Seq, acks[len(acks)-1].Seq+1)
	}
}

// With RequireMount, a directory that is not a mount point gets no record:
// the bare target directory of a node is not the volume.
func TestRun_RequireMount_BareDirectory(t *testing.T) {
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	must(t, os.Mkdir(vol, 0o755))
	ledgerPath := filepath.Join(dir, "ledger")
	var fails atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Dir: vol, PodUID: "u", Node: "n", Ledger: ledgerPath, Interval: 5 * time.Millisecond,
			RetryAfter: 5 * time.Millisecond, RequireMount: true, Logf: func(string, ...any) { fails.Add(1) }})
	}()
	waitFor(t, func() bool { return fails.Load() > 0 })
	time.Sleep(50 * time.Millisecond)
	cancel()
	must(t, <-done)
	if acks, _ := ReadLedger(ledgerPath); len(acks) != 0 {
		t.Errorf("acknowledged %d records in a bare directory", len(acks))
	}
	if _, err := os.Stat(filepath.Join(vol, RecordsFile("u"))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("records file created in a bare directory: %v", err)
	}
	if err := isMountPoint("/proc"); err != nil {
		t.Errorf("isMountPoint(/proc) = %v, want nil", err)
	}
	if err := isMountPoint(vol); !errors.Is(err, ErrNotMounted) {
		t.Errorf("isMountPoint(%s) = %v, want ErrNotMounted", vol, err)
	}
}

func TestRun_BadConfig(t *testing.T) {
	for name, c := range map[string]Config{
		"no dir":        {PodUID: "u", Node: "n", Ledger: "l"},
		"no ledger":     {Dir: "d", PodUID: "u", Node: "n"},
		"space in uid":  {Dir: "d", PodUID: "a b", Node: "n", Ledger: "l"},
		"no node":       {Dir: "d", PodUID: "u", Ledger: "l"},
		"negative wait": {Dir: "d", PodUID: "u", Node: "n", Ledger: "l", Interval: -1},
	} {
		if err := Run(context.Background(), c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: Run = %v, want ErrBadConfig", name, err)
		}
	}
}

func TestReadFileDirect_MatchesContent(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	want := bytes.Repeat([]byte("0123456789abcdef"), 70000) // > 1 MiB, not aligned
	want = append(want, "tail"...)
	must(t, os.WriteFile(p, want, 0o644))
	got, err := ReadFileDirect(p)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("ReadFileDirect: %d bytes, %v; want %d bytes equal", len(got), err, len(want))
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
