package enginenode

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// render shows the kept writes as "off:content@boot" in offset order.
func render(u *unflushed) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var parts []string
	for _, e := range u.ext {
		parts = append(parts, fmt.Sprintf("%d:%s@%s", e.off, e.data, e.boot))
	}
	return strings.Join(parts, " ")
}

// TestUnflushed_Add_LatestContentPerRange is the specification of add: a
// newer write replaces, trims or splits what it overlaps, so every byte is
// kept once, with its latest content.
func TestUnflushed_Add_LatestContentPerRange(t *testing.T) {
	type w struct {
		off  int64
		data string
		boot string
	}
	for _, tc := range []struct {
		name   string
		writes []w
		want   string
	}{
		{"apart", []w{{0, "aaaa", "b1"}, {10, "bb", "b1"}}, "0:aaaa@b1 10:bb@b1"},
		{"same range", []w{{0, "aaaa", "b1"}, {0, "BBBB", "b2"}}, "0:BBBB@b2"},
		{"covers two", []w{{0, "aa", "b1"}, {4, "cc", "b1"}, {0, "XXXXXXXX", "b1"}}, "0:XXXXXXXX@b1"},
		{"splits one", []w{{0, "aaaaaaaa", "b1"}, {2, "XX", "b2"}}, "0:aa@b1 2:XX@b2 4:aaaa@b1"},
		{"trims the head", []w{{0, "aaaa", "b1"}, {2, "XXXX", "b1"}}, "0:aa@b1 2:XXXX@b1"},
		{"trims the tail", []w{{4, "aaaa", "b1"}, {2, "XXXX", "b1"}}, "2:XXXX@b1 6:aa@b1"},
		{"touching", []w{{0, "aa", "b1"}, {2, "bb", "b1"}, {4, "cc", "b1"}, {1, "XXXX", "b1"}}, "0:a@b1 1:XXXX@b1 5:c@b1"},
		{"no boot id trims and keeps nothing", []w{{0, "aaaa", "b1"}, {1, "XX", ""}}, "0:a@b1 3:a@b1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUnflushed(nil)
			for _, x := range tc.writes {
				u.add(x.off, []byte(x.data), x.boot)
			}
			if got := render(u); got != tc.want {
				t.Fatalf("kept %q, want %q", got, tc.want)
			}
			var sum int64
			for _, e := range u.ext {
				sum += int64(cap(e.data))
			}
			if held, _ := u.size(); held != sum {
				t.Fatalf("size says %d bytes, the entries hold %d", held, sum)
			}
		})
	}
}

// A piece trimmed down to a small part of a large write does not keep the
// whole write's buffer alive: the memory counted is the memory held.
func TestUnflushed_Add_TrimmedPiecesReleaseTheirBuffer(t *testing.T) {
	u := newUnflushed(nil)
	big := bytes.Repeat([]byte{1}, 1<<20)
	for i := range 64 {
		u.add(int64(i)*4096, big, "b1") // each trims all but the first 4 KiB of the one before
	}
	held, n := u.size()
	if n != 64 || held > 2<<20 {
		t.Fatalf("%d entries hold %d bytes; want 64 entries in at most 2 MiB (63 pieces of 4 KiB and one 1 MiB write)", n, held)
	}
}

// TestUnflushed_Flushed_DropsOnlyWhatTheFlushCovered: a flush drops the
// writes acknowledged before it was sent by the machine boot that flushed;
// writes acknowledged after it, or by another boot, stay; the latter make
// the flush stale (they must be sent again).
func TestUnflushed_Flushed_DropsOnlyWhatTheFlushCovered(t *testing.T) {
	u := newUnflushed(nil)
	u.add(0, []byte("aa"), "b1")
	u.add(10, []byte("bb"), "b1")
	upTo := u.last()
	u.add(20, []byte("cc"), "b1") // acknowledged while the flush was on its way
	if stale := u.flushed(upTo, "b1"); stale {
		t.Fatal("a flush by the same boot is stale")
	}
	if got := render(u); got != "20:cc@b1" {
		t.Fatalf("after the flush: %q, want only the write acknowledged after it was sent", got)
	}

	// The machine rebooted: a flush by b2 covers nothing b1 acknowledged.
	u.add(30, []byte("dd"), "b2")
	upTo = u.last()
	if stale := u.flushed(upTo, "b2"); !stale {
		t.Fatal("a flush by another boot than kept writes is not stale")
	}
	if got := render(u); got != "20:cc@b1" {
		t.Fatalf("after the flush by b2: %q, want b1's write kept (b2's is durable)", got)
	}
	if !u.stale("b2") || u.stale("b1") {
		t.Fatal("stale: want true for b2 (b1's write waits) and false for b1")
	}
	ws := u.pending("b2")
	if len(ws) != 1 || string(ws[0].Data) != "cc" || ws[0].Boot != "b1" {
		t.Fatalf("pending(b2) = %+v, want b1's write", ws)
	}
	if !u.resent(ws[0], "b2") || u.stale("b2") {
		t.Fatal("a write sent again to b2 is still stale")
	}
	if stale := u.flushed(u.last(), "b2"); stale || render(u) != "" {
		t.Fatalf("after the second flush: stale %v, kept %q; want nothing", stale, render(u))
	}
}

// pending lists the writes oldest acknowledgement first, whatever their
// offsets; resent refuses an entry a newer write replaced.
func TestUnflushed_Pending_OldestFirst(t *testing.T) {
	u := newUnflushed(nil)
	u.add(30, []byte("c"), "b1")
	u.add(10, []byte("a"), "b1")
	u.add(20, []byte("b"), "b1")
	var got []string
	for _, w := range u.pending("b2") {
		got = append(got, string(w.Data))
	}
	if strings.Join(got, "") != "cab" {
		t.Fatalf("pending order %v, want the acknowledgement order c a b", got)
	}
	w := u.pending("b2")[0]
	u.add(30, []byte("C"), "b2")
	if u.resent(w, "b2") {
		t.Fatal("resent accepted an entry a newer write replaced")
	}
}

// A datapath without boot ids: nothing is kept, a flush is never stale.
func TestUnflushed_NoBootID_KeepsNothing(t *testing.T) {
	u := newUnflushed(nil)
	u.add(0, []byte("aa"), "")
	if held, n := u.size(); held != 0 || n != 0 || u.stale("") || u.flushed(u.last(), "") {
		t.Fatalf("kept %d bytes in %d entries for a datapath without boot ids", held, n)
	}
}
