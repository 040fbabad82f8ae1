package raftstate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/vigil-storage/vigil/datapath"
)

// entryAt is c as the entry at index of term, recorded in logs first as
// Raft does.
func entryAt(t *testing.T, logs raft.LogStore, index, term uint64, c Command) *raft.Log {
	t.Helper()
	if c.At.IsZero() {
		c.At = t0
	}
	data, err := c.encode()
	if err != nil {
		t.Fatal(err)
	}
	l := &raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: data}
	if err := logs.StoreLog(l); err != nil {
		t.Fatal(err)
	}
	return l
}

func applyAt(t *testing.T, f *FSM, logs raft.LogStore, index, term uint64, c Command) {
	t.Helper()
	f.Apply(entryAt(t, logs, index, term, c))
}

// TestFSM_WaitApplied_CountsOnlyObservedEntries: WaitApplied answers once
// the entry is applied and the observer (the Store's refresh under the
// volume's write lock) returned, not before; bad input is refused; an
// entry of another term at the index is ErrDiverged; a wait that runs out
// says how far this server got.
func TestFSM_WaitApplied_CountsOnlyObservedEntries(t *testing.T) {
	f := NewFSM()
	logs := raft.NewInmemStore()
	f.logs = logs
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, bad := range [][2]uint64{{0, 1}, {1, 0}} {
		if err := f.WaitApplied(ctx, bad[0], bad[1]); !errors.Is(err, datapath.ErrInvalidArgument) {
			t.Errorf("WaitApplied(%d, %d): %v; want ErrInvalidArgument", bad[0], bad[1], err)
		}
	}
	applyAt(t, f, logs, 1, 1, Command{Op: OpAddServer, Member: member("s1")})
	applyAt(t, f, logs, 2, 1, Command{Op: OpCreateVolume, VolumeID: vol1, Name: "pv-1", Size: 1 << 20, Access: datapath.AccessRWO, Server: "s1"})
	if err := f.WaitApplied(ctx, 2, 1); err != nil {
		t.Fatalf("WaitApplied of an applied entry: %v", err)
	}
	if err := f.WaitApplied(ctx, 2, 7); !errors.Is(err, ErrDiverged) {
		t.Fatalf("WaitApplied of index 2 of another term: %v; want ErrDiverged", err)
	}

	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	f.OnApplied(func([]string) { entered <- struct{}{}; <-gate })
	done := make(chan error, 1)
	go func() { done <- f.WaitApplied(ctx, 3, 1) }()
	grant := entryAt(t, logs, 3, 1, Command{Op: OpGrant, VolumeID: vol1, Node: "n1", Use: datapath.UseReadWrite})
	go f.Apply(grant)
	<-entered
	select {
	case err := <-done:
		t.Fatalf("WaitApplied answered (%v) while the observer of the entry had not returned", err)
	case <-time.After(50 * time.Millisecond):
	}
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	err := f.WaitApplied(short, 3, 1)
	cancelShort()
	if err == nil || !strings.Contains(err.Error(), "applied up to 2") {
		t.Fatalf("WaitApplied that ran out: %v; want it to say it applied up to 2", err)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatalf("WaitApplied once the observer returned: %v", err)
	}
	if i, term := f.Done(); i != 3 || term != 1 {
		t.Fatalf("Done: %d, %d; want 3, 1", i, term)
	}
}
