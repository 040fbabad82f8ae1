package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/fencebackend"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// heldApply is a server's Control whose application of each change to its
// volumes (the refresh of the store's tables) waits delay and, while held,
// until released: a loaded, or cut-off, data server.
type heldApply struct {
	*raftstate.Group
	delay atomic.Int64 // nanoseconds
	mu    sync.Mutex
	gate  chan struct{} // nil: not held
}

func (h *heldApply) OnApplied(fn func([]string)) {
	if fn == nil {
		h.Group.OnApplied(nil)
		return
	}
	h.Group.OnApplied(func(ids []string) {
		time.Sleep(time.Duration(h.delay.Load()))
		h.mu.Lock()
		gate := h.gate
		h.mu.Unlock()
		if gate != nil {
			<-gate
		}
		fn(ids)
	})
}

// hold makes the server apply nothing until release is called.
func (h *heldApply) hold() (release func()) {
	gate := make(chan struct{})
	h.mu.Lock()
	h.gate = gate
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			h.gate = nil
			h.mu.Unlock()
			close(gate)
		})
	}
}

// startHeldGroup starts three servers whose applies heldApply wraps, with
// the default timing: these tests move the leadership on purpose, and a
// loaded machine (the race detector) must not move it by itself.
func startHeldGroup(t *testing.T) ([]*datapathtest.Server, []*heldApply) {
	t.Helper()
	held := make([]*heldApply, 3)
	srvs := datapathtest.StartGroupWrapped(t, 3, raftstate.DefaultTiming, func(i int, g *raftstate.Group) datapath.Control {
		held[i] = &heldApply{Group: g}
		return held[i]
	})
	return srvs, held
}

// leader is the index of the server that leads now, -1 for none.
func leader(srvs []*datapathtest.Server, skip map[int]bool) int {
	for i, s := range srvs {
		if !skip[i] && s.Group.IsLeader() {
			return i
		}
	}
	return -1
}

// leadOn hands the leadership over until server i leads.
func leadOn(t *testing.T, srvs []*datapathtest.Server, i int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		l := leader(srvs, nil)
		switch {
		case l == i:
			return
		case l >= 0:
			if err := srvs[l].Group.TransferLeadershipTo(fmt.Sprintf("datapath-%d", i)); err != nil {
				t.Logf("transfer leadership from server %d: %v", l, err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("server %d did not become the leader", i)
}

// controllerClient dials srvs as the controller, every server listed.
func controllerClient(t *testing.T, srvs []*datapathtest.Server, opts ...client.Option) *client.Client {
	t.Helper()
	var others []string
	for _, s := range srvs[1:] {
		others = append(others, s.Addr)
	}
	opts = append([]client.Option{client.WithServers(others...), client.WithTimeout(2 * time.Second)}, opts...)
	c, err := client.Dial(context.Background(), srvs[0].Addr, srvs[0].Token, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// volumeOn creates a volume whose data server i holds (a client given no
// servers creates at the leader, which holds the data) and grants it to
// node through c. Should the leadership move during the
// create, it tries again under another name.
func volumeOn(t *testing.T, ctx context.Context, c *client.Client, srvs []*datapathtest.Server, i int, name, node string) (datapath.Volume, uint64) {
	t.Helper()
	at, err := client.Dial(ctx, srvs[i].Addr, srvs[i].Token) // no servers: the create of before, at the leader
	if err != nil {
		t.Fatal(err)
	}
	defer at.Close()
	var v datapath.Volume
	for attempt := 0; ; attempt++ {
		leadOn(t, srvs, i)
		v, err = at.CreateVolume(ctx, fmt.Sprintf("%s-%d", name, attempt), 1<<20, datapath.AccessRWO)
		if err == nil {
			if _, gerr := srvs[i].Store.GetVolume(v.ID); gerr == nil {
				break
			}
		}
		if attempt == 4 {
			t.Fatalf("create %s on server %d: %v (volume %s)", name, i, err, v.ID)
		}
		t.Logf("create %s on server %d, attempt %d: %v (volume %s); the leadership moved", name, i, attempt, err, v.ID)
	}
	e, err := c.Grant(ctx, v.ID, node)
	if err != nil {
		t.Fatalf("grant %s to %s: %v", name, node, err)
	}
	return v, e
}

// TestClient_Group_FenceOfAFollowersVolume_NoWriteLandsAfter: the volume's
// data is on a follower that applies each change 30 ms later than the
// leader; a zombie
// writes to it at full speed while the leader fences it through the
// client. No write lands after Fence returned, none that started after it
// is acknowledged, and a zombie write right after it is refused: Fence
// returned only once the follower applied it.
func TestClient_Group_FenceOfAFollowersVolume_NoWriteLandsAfter(t *testing.T) {
	srvs, held := startHeldGroup(t)
	held[0].delay.Store(int64(30 * time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := controllerClient(t, srvs)
	for round := 0; round < 2; round++ {
		v, epoch := volumeOn(t, ctx, c, srvs, 0, fmt.Sprintf("race-%d", round), "zombie")
		leadOn(t, srvs, 1+round)
		z, err := client.Dial(ctx, srvs[0].Addr, srvs[0].NodeToken("zombie"))
		if err != nil {
			t.Fatal(err)
		}
		write := func(off int64, p []byte) error { return z.WriteAt(ctx, v.ID, "zombie", epoch, off, p) }
		fence := func() error {
			if _, err := c.Fence(ctx, v.ID, "zombie"); err != nil {
				return err
			}
			if err := write(0, []byte("zombie")); !errors.Is(err, datapath.ErrFenced) {
				t.Errorf("a zombie write to the follower right after the fence returned: %v; want ErrFenced (the fence returned before the server that holds the data applied it)", err)
			}
			return nil
		}
		datapathtest.RaceFence(t, srvs[0].Store.DataFile(v.ID), write, fence)
		_ = z.Close()
	}
}

// TestClient_Group_OldLeadersVolumesChangeAfterALeaderChange: once the
// leadership moved, the volumes of the old leader (a follower now) are
// fenced, granted anew, released and deleted through the new leader, and
// each change is in the follower's own table when the call returns. A
// caller that does not confirm (the Store's own calls, as a client from
// before WaitApplied gets) is still refused with ErrHeldElsewhere.
func TestClient_Group_OldLeadersVolumesChangeAfterALeaderChange(t *testing.T) {
	srvs, held := startHeldGroup(t)
	held[0].delay.Store(int64(20 * time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := controllerClient(t, srvs)
	v, e1 := volumeOn(t, ctx, c, srvs, 0, "old", "n1")
	leadOn(t, srvs, 2)
	index, term := srvs[0].Group.LastApplied()
	if err := srvs[2].Group.WaitApplied(ctx, index, term); err != nil {
		t.Fatal(err)
	}
	l := srvs[2].Store
	if _, err := l.Fence(v.ID, "n1"); !errors.Is(err, datapath.ErrHeldElsewhere) {
		t.Fatalf("a fence at the leader by a caller that does not confirm: %v; want ErrHeldElsewhere", err)
	}
	if _, err := l.FenceNode("n1"); !errors.Is(err, datapath.ErrHeldElsewhere) {
		t.Fatalf("FenceNode at the leader by a caller that does not confirm: %v; want ErrHeldElsewhere", err)
	}
	e2, err := c.Fence(ctx, v.ID, "n1")
	if err != nil || e2 != e1+1 {
		t.Fatalf("fence of the old leader's volume: %d, %v; want epoch %d", e2, err, e1+1)
	}
	assertRow(t, srvs[0].Store, v.ID, "n1", datapath.StateFenced, e2)
	e3, err := c.Grant(ctx, v.ID, "n2")
	if err != nil || e3 != e2+1 {
		t.Fatalf("grant of the old leader's volume to a new node: %d, %v; want epoch %d", e3, err, e2+1)
	}
	assertRow(t, srvs[0].Store, v.ID, "n2", datapath.StateGranted, e3)
	eng, err := client.Dial(ctx, srvs[1].Addr, srvs[1].NodeToken("n2"), client.WithServers(srvs[0].Addr, srvs[2].Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if err := eng.Release(ctx, v.ID, "n2"); err != nil {
		t.Fatalf("the engine's own release of a volume a follower holds: %v", err)
	}
	assertRow(t, srvs[0].Store, v.ID, "n2", datapath.StateReleased, e3)
	if err := c.DeleteVolume(ctx, v.ID); err != nil {
		t.Fatalf("delete of the old leader's volume: %v", err)
	}
	if _, err := srvs[0].Store.GetVolume(v.ID); !errors.Is(err, datapath.ErrNotFound) {
		t.Fatalf("the volume is still on its server after DeleteVolume returned: %v", err)
	}
}

// assertRow fails t unless the store's own table has node's row in state
// with epoch.
func assertRow(t *testing.T, s *datapath.Store, volumeID, node string, state datapath.AttachmentState, epoch uint64) {
	t.Helper()
	rows, err := s.Attachments(volumeID)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range rows {
		if a.Node == node {
			if a.State != state || a.Epoch != epoch {
				t.Fatalf("the data server's row of %s on %s is %s at epoch %d; want %s at %d", node, volumeID, a.State, a.Epoch, state, epoch)
			}
			return
		}
	}
	t.Fatalf("the data server has no row of %s on %s (rows %+v)", node, volumeID, rows)
}

// TestClient_Group_HolderThatDoesNotApply_NothingReportedDone: the server
// that holds the volume's data stops applying (cut off from the group's
// log): the fence is committed but returns ErrNotApplied naming that server
// and its address, and the fence back end reports the volume not fenced;
// once the server applies again, calling again confirms. With the server
// stopped, the same.
func TestClient_Group_HolderThatDoesNotApply_NothingReportedDone(t *testing.T) {
	srvs, held := startHeldGroup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := controllerClient(t, srvs, client.WithApplyWait(300*time.Millisecond))
	v, _ := volumeOn(t, ctx, c, srvs, 0, "cut", "n1")
	w, _ := volumeOn(t, ctx, c, srvs, 1, "other", "n1")
	leadOn(t, srvs, 2)
	release := held[0].hold()
	defer release()
	_, err := c.Fence(ctx, v.ID, "n1")
	if !errors.Is(err, datapath.ErrNotApplied) || !strings.Contains(err.Error(), "datapath-0 at "+srvs[0].Addr) {
		t.Fatalf("fence of a volume whose server does not apply: %v; want ErrNotApplied naming datapath-0 at %s", err, srvs[0].Addr)
	}
	assertRow(t, srvs[0].Store, v.ID, "n1", datapath.StateGranted, 1)
	b := fencebackend.New(c)
	fenced, err := b.FenceVolumes(ctx, "n1", []string{v.ID})
	if !errors.Is(err, datapath.ErrNotApplied) || len(fenced) != 0 {
		t.Fatalf("fence back end: %+v, %v; want nothing fenced and an error naming the server that did not confirm", fenced, err)
	}
	release()
	e, err := c.Fence(ctx, v.ID, "n1")
	if err != nil {
		t.Fatalf("fence again once the server applies: %v", err)
	}
	assertRow(t, srvs[0].Store, v.ID, "n1", datapath.StateFenced, e)

	srvs[1].Stop()
	if _, err := c.Fence(ctx, w.ID, "n1"); !errors.Is(err, datapath.ErrNotApplied) || !strings.Contains(err.Error(), "datapath-1 at "+srvs[1].Addr) {
		t.Fatalf("fence of a volume whose server is stopped: %v; want ErrNotApplied naming datapath-1 at %s", err, srvs[1].Addr)
	}
}

// TestClient_Group_FenceNode_OneHolderDown: a node holds live grants on
// volumes of all three servers; the server of one is stopped. FenceNode
// reports the volumes of the two others fenced (each applied by its
// server) and ErrNotApplied naming the stopped server and its volumes,
// which it does not report fenced.
func TestClient_Group_FenceNode_OneHolderDown(t *testing.T) {
	srvs, _ := startHeldGroup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := controllerClient(t, srvs, client.WithApplyWait(300*time.Millisecond))
	byServer := map[int][]string{}
	for i := range 3 {
		for k := range 2 {
			v, _ := volumeOn(t, ctx, c, srvs, i, fmt.Sprintf("v%d-%d", i, k), "zombie")
			byServer[i] = append(byServer[i], v.ID)
		}
	}
	leadOn(t, srvs, 0)
	srvs[2].Stop()
	fs, err := c.FenceNode(ctx, "zombie")
	if !errors.Is(err, datapath.ErrNotApplied) || !strings.Contains(err.Error(), "datapath-2 at "+srvs[2].Addr) {
		t.Fatalf("FenceNode with one data server down: %v; want ErrNotApplied naming datapath-2", err)
	}
	got := map[string]bool{}
	for _, f := range fs {
		got[f.VolumeID] = true
	}
	t.Logf("FenceNode: %v", err)
	for i, ids := range byServer {
		for _, id := range ids {
			if got[id] != (i != 2) {
				t.Errorf("volume %s of server %d: reported fenced %v", id, i, got[id])
			}
			if i != 2 {
				assertRow(t, srvs[i].Store, id, "zombie", datapath.StateFenced, 2)
			}
		}
	}
}

// TestClient_WaitApplied_BadInputAndIdentity: WaitApplied refuses an index
// or term of 0 and a caller it cannot authenticate, and changes nothing; an
// engine may ask (its own Release of a volume a follower holds is confirmed
// so); an index the server applied is confirmed at once.
func TestClient_WaitApplied_BadInputAndIdentity(t *testing.T) {
	srvs, _ := startHeldGroup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := controllerClient(t, srvs)
	v, _ := volumeOn(t, ctx, c, srvs, 0, "bad", "n1")
	index, term := srvs[0].Group.LastApplied()
	for _, tc := range []struct{ index, term uint64 }{{0, term}, {index, 0}} {
		if err := c.WaitApplied(ctx, tc.index, tc.term); !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), "must be positive") {
			t.Errorf("WaitApplied(%d, %d): %v; want ErrInvalidArgument saying both must be positive", tc.index, tc.term, err)
		}
	}
	bad, err := client.Dial(ctx, srvs[1].Addr, "not-a-token")
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.WaitApplied(ctx, index, term); !errors.Is(err, datapath.ErrUnauthenticated) {
		t.Errorf("WaitApplied with a token the server does not know: %v; want ErrUnauthenticated", err)
	}
	e, err := client.Dial(ctx, srvs[1].Addr, srvs[1].NodeToken("n1"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.WaitApplied(ctx, index, term); err != nil {
		t.Errorf("WaitApplied as an engine (its own Release is confirmed so): %v", err)
	}
	assertRow(t, srvs[0].Store, v.ID, "n1", datapath.StateGranted, 1)
	w, err := client.Dial(ctx, srvs[1].Addr, srvs[1].Token)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.WaitApplied(ctx, index, term); err != nil {
		t.Errorf("WaitApplied of an index the server applied: %v", err)
	}
}

// TestClient_Group_NewLeaderBehindDoesNotReportAFenceNodeDone: a leader new
// to the role whose applied state is behind (it has not applied the grant
// yet) cannot tell, before it proposes, that a FenceNode of a caller that
// does not confirm touches a volume another server holds; the group's entry
// fences it all the same. The call is then not reported done
// (ErrNotApplied), since the volume's server was never asked.
func TestClient_Group_NewLeaderBehindDoesNotReportAFenceNodeDone(t *testing.T) {
	srvs, held := startHeldGroup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := controllerClient(t, srvs)
	v, _ := volumeOn(t, ctx, c, srvs, 0, "behind", "n0")
	if err := c.Release(ctx, v.ID, "n0"); err != nil {
		t.Fatal(err)
	}
	release := held[2].hold() // server 2 applies nothing from here on
	defer release()
	if err := c.Release(ctx, v.ID, "n0"); err != nil { // server 2 stops at this entry (a release again still touches the volume)
		t.Fatal(err)
	}
	if _, err := c.Grant(ctx, v.ID, "n1"); err != nil {
		t.Fatal(err)
	}
	leadOn(t, srvs, 2)
	done := make(chan error, 1)
	go func() {
		fs, err := srvs[2].Store.FenceNode("n1")
		if err == nil {
			err = fmt.Errorf("reported %+v fenced", fs)
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // FenceNode has read server 2's state, behind the grant
	release()
	if err := <-done; !errors.Is(err, datapath.ErrNotApplied) || !strings.Contains(err.Error(), v.ID+" on datapath-0") {
		t.Fatalf("FenceNode at a leader behind, for a caller that does not confirm: %v; want ErrNotApplied naming %s on datapath-0", err, v.ID)
	}
}

// TestClient_Group_NewLeaderBehindStillConfirmsWithTheHolder: a leader new
// to the role that has not applied a volume's create yet still finds the
// server that holds it (it brings its state up to date first) and the fence
// is confirmed with that server: while that server applies nothing, the
// fence is not reported done.
func TestClient_Group_NewLeaderBehindStillConfirmsWithTheHolder(t *testing.T) {
	srvs, held := startHeldGroup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := controllerClient(t, srvs, client.WithApplyWait(500*time.Millisecond))
	w, _ := volumeOn(t, ctx, c, srvs, 0, "first", "n9")
	releaseLeader := held[2].hold() // server 2 applies nothing from here on
	defer releaseLeader()
	if err := c.Release(ctx, w.ID, "n9"); err != nil { // server 2 stops at this entry
		t.Fatal(err)
	}
	v, _ := volumeOn(t, ctx, c, srvs, 0, "behind", "n1")
	leadOn(t, srvs, 2)
	releaseHolder := held[0].hold()
	defer releaseHolder()
	go func() { time.Sleep(100 * time.Millisecond); releaseLeader() }()
	if _, err := c.Fence(ctx, v.ID, "n1"); !errors.Is(err, datapath.ErrNotApplied) || !strings.Contains(err.Error(), "datapath-0") {
		t.Fatalf("fence through a leader behind while the holder applies nothing: %v; want ErrNotApplied naming datapath-0", err)
	}
}
