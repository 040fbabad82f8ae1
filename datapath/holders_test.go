package datapath_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

// TestStore_WaitApplied_BadInputAndBound: a timeout outside (0, 30 s], an
// index or term of 0, and a store without a control group are refused
// with ErrInvalidArgument saying what is allowed; an index not applied
// within the timeout is ErrNotApplied naming the server and how far it
// got; an applied one is confirmed at once.
func TestStore_WaitApplied_BadInputAndBound(t *testing.T) {
	s, closeAll := openControlled(t, t.TempDir(), datapath.Options{Capacity: 1 << 30}, nil)
	defer closeAll()
	v, err := s.CreateVolume("w", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Grant(v.ID, "n1"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cases := []struct {
		index, term uint64
		timeout     time.Duration
		want        string
	}{
		{5, 1, 0, "allowed are more than 0 and at most 30s"},
		{5, 1, -time.Second, "allowed are more than 0 and at most 30s"},
		{5, 1, 31 * time.Second, "allowed are more than 0 and at most 30s"},
		{0, 1, time.Second, "both must be positive"},
		{5, 0, time.Second, "both must be positive"},
	}
	for _, tc := range cases {
		if err := s.WaitApplied(ctx, tc.index, tc.term, tc.timeout); !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("WaitApplied(%d, %d, %s): %v; want ErrInvalidArgument saying %q", tc.index, tc.term, tc.timeout, err, tc.want)
		}
	}
	if err := s.WaitApplied(ctx, 1<<40, 1, 50*time.Millisecond); !errors.Is(err, datapath.ErrNotApplied) || !strings.Contains(err.Error(), "server "+testServerID) ||
		!strings.Contains(err.Error(), "applied up to") {
		t.Errorf("WaitApplied of an index far ahead: %v; want ErrNotApplied naming the server and how far it got", err)
	}
	if as, _ := s.Attachments(v.ID); len(as) != 1 || as[0].State != datapath.StateGranted || as[0].Epoch != 1 {
		t.Errorf("attachments changed: %+v", as)
	}

	plain, err := datapath.Open(t.TempDir(), datapath.Options{Capacity: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.WaitApplied(ctx, 1, 1, time.Second); !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), "not in a control group") {
		t.Errorf("WaitApplied at a store without a control group: %v; want ErrInvalidArgument", err)
	}
}
