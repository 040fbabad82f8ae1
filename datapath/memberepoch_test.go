package datapath_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// memberEpochs reports every volume at the member epoch `at` holds, as the
// group does once a committed change moved the volume's replica set on (a
// one-member group cannot hold the replicas such a change needs).
type memberEpochs struct {
	*raftstate.Group
	at *atomic.Uint64
}

func (m memberEpochs) AppliedVolume(id string) (datapath.ControlVolume, []datapath.Attachment, bool) {
	cv, rows, ok := m.Group.AppliedVolume(id)
	cv.MemberEpoch = m.at.Load()
	return cv, rows, ok
}

// TestStoreControl_WriteAtAStaleMemberEpochRefused: a write carries the
// member epoch its writer holds, and the server refuses one at any other
// than the member epoch it applied, with ErrStaleMemberEpoch and nothing
// written; a fenced node is refused as fenced first.
func TestStoreControl_WriteAtAStaleMemberEpochRefused(t *testing.T) {
	var at atomic.Uint64
	s, closeAll := openControlled(t, t.TempDir(), datapath.Options{Capacity: 1 << 30},
		func(g *raftstate.Group) datapath.Control { return memberEpochs{Group: g, at: &at} })
	defer closeAll()
	v, err := s.CreateVolume("a", 1<<20, datapath.AccessRWO)
	must(t, err)
	e, err := s.Grant(v.ID, "n1")
	must(t, err)
	must(t, s.WriteAt(v.ID, "n1", e, 0, []byte("one ")))

	at.Store(2) // the replica set moved on twice; the next change of the volume applies it here
	if again, err := s.Grant(v.ID, "n1"); err != nil || again != e {
		t.Fatalf("grant n1 again: %d, %v; want %d", again, err, e)
	}
	for _, member := range []uint64{0, 1, 3} {
		err := s.WriteAtMember(v.ID, "n1", e, member, 0, []byte("old "))
		want := "carries member epoch " + string(rune('0'+member)) + "; this server applied member epoch 2"
		if !errors.Is(err, datapath.ErrStaleMemberEpoch) || !strings.Contains(err.Error(), want) {
			t.Fatalf("write at member epoch %d: %v; want ErrStaleMemberEpoch containing %q", member, err, want)
		}
	}
	if err := s.WriteAt(v.ID, "n1", e, 0, []byte("old ")); !errors.Is(err, datapath.ErrStaleMemberEpoch) {
		t.Fatalf("WriteAt (member epoch 0) of a volume at member epoch 2: %v; want ErrStaleMemberEpoch", err)
	}
	if got, err := s.ReadAt(v.ID, "n1", e, 0, 4); err != nil || !bytes.Equal(got, []byte("one ")) {
		t.Fatalf("after the refused writes: %q, %v; want \"one \": a refused write must change nothing", got, err)
	}
	must(t, s.WriteAtMember(v.ID, "n1", e, 2, 0, []byte("two ")))

	if _, err := s.Fence(v.ID, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAtMember(v.ID, "n1", e, 0, 0, []byte("zomb")); !errors.Is(err, datapath.ErrFenced) {
		t.Fatalf("a fenced node's write at a stale member epoch: %v; want ErrFenced (the fence is checked first)", err)
	}
}

// TestStatus_StaleMemberEpochCrossesGRPC: the refusal reaches a gRPC
// client as itself, code Aborted, reason STALE_MEMBER_EPOCH.
func TestStatus_StaleMemberEpochCrossesGRPC(t *testing.T) {
	err := fmt.Errorf("write volume vol-1: %w", datapath.ErrStaleMemberEpoch)
	st := datapath.ToStatus(err)
	if status.Code(st) != codes.Aborted {
		t.Fatalf("code %v, want Aborted", status.Code(st))
	}
	if got := datapath.FromStatus(st); !errors.Is(got, datapath.ErrStaleMemberEpoch) || errors.Is(got, datapath.ErrStaleSession) {
		t.Fatalf("over gRPC the refusal is %v; want ErrStaleMemberEpoch, and only it", got)
	}
}
