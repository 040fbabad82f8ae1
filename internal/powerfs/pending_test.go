package powerfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestPending_ReadAt_MergesOverBacking is the specification of what a file
// shows between two syncs, step by step from a backing file of "abcdefgh".
func TestPending_ReadAt_MergesOverBacking(t *testing.T) {
	backing := bytes.NewReader([]byte("abcdefgh"))
	type step struct {
		do   func(p *pending) error
		want string
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"nothing pending shows the backing file", []step{
			{func(*pending) error { return nil }, "abcdefgh"},
		}},
		{"a write lands over the backing bytes", []step{
			{func(p *pending) error { return p.writeAt(backing, []byte("XY"), 2) }, "abXYefgh"},
		}},
		{"a write past the end grows the file with zeros between", []step{
			{func(p *pending) error { return p.writeAt(backing, []byte("Z"), 10) }, "abcdefgh\x00\x00Z"},
		}},
		{"a truncate cuts, and growing again shows zeros, not the old bytes", []step{
			{func(p *pending) error { p.truncate(3); return nil }, "abc"},
			{func(p *pending) error { p.truncate(6); return nil }, "abc\x00\x00\x00"},
		}},
		{"a truncate inside a written page zeroes its tail", []step{
			{func(p *pending) error { return p.writeAt(backing, []byte("12345678"), 0) }, "12345678"},
			{func(p *pending) error { p.truncate(2); return nil }, "12"},
			{func(p *pending) error { p.truncate(4); return nil }, "12\x00\x00"},
		}},
		{"fallocate grows the file with zeros", []step{
			{func(p *pending) error { p.extend(10); return nil }, "abcdefgh\x00\x00"},
			{func(p *pending) error { p.extend(4); return nil }, "abcdefgh\x00\x00"},
		}},
		{"a write across a page boundary", []step{
			{func(p *pending) error { return p.writeAt(backing, bytes.Repeat([]byte("w"), 10), pageSize-5) }, "abcdefgh" + string(make([]byte, pageSize-13)) + "wwwwwwwwww"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPending(8)
			for i, s := range tc.steps {
				if err := s.do(p); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 2*pageSize)
				n, err := p.readAt(backing, buf, 0)
				if err != nil || string(buf[:n]) != s.want {
					t.Fatalf("step %d: read %q, %v; want %q", i, buf[:n], err, s.want)
				}
			}
		})
	}
}

// TestPending_Apply_BackingEqualsView checks that apply leaves in the backing
// file exactly what the layer showed.
func TestPending_Apply_BackingEqualsView(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := newPending(16)
	p.truncate(4)
	if err := p.writeAt(f, []byte("XY"), 6); err != nil {
		t.Fatal(err)
	}
	if err := p.writeAt(f, []byte("Z"), pageSize+1); err != nil {
		t.Fatal(err)
	}
	view := make([]byte, 3*pageSize)
	n, err := p.readAt(f, view, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.apply(int(f.Fd()), 16); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, view[:n]) || n != pageSize+2 {
		t.Fatalf("backing after apply: %d bytes %q...; the layer showed %d bytes %q...", len(got), got[:min(len(got), 12)], n, view[:12])
	}
}
