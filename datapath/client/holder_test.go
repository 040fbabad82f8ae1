package client_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// TestClient_Group_IOGoesToTheHolder: three servers in one control group
// over loopback. A volume's data is on one server (the leader that created
// it). Another server refuses its I/O with ErrNotHolder naming the holder's
// address, having read and written nothing; an engine's client dialed to
// that other server sends the volume's writes (bulk channel and gRPC),
// reads, flushes and reads of the volume to the holder by itself. When the
// holder stops, the volume's I/O fails within the client's bounded retries
// with an error naming the holder, while a volume another server holds keeps
// working through the same client.
func TestClient_Group_IOGoesToTheHolder(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctl, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token, client.WithServers(srvs[1].Addr, srvs[2].Addr), client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	a, err := ctl.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	ea, err := ctl.Grant(ctx, a.ID, "n1")
	if err != nil {
		t.Fatal(err)
	}
	waitApplied(t, srvs[1], a.ID)

	// The server itself: a refusal naming the holder, nothing written.
	err = srvs[1].Store.WriteAt(a.ID, "n1", ea, 0, []byte("x"))
	var nh *datapath.NotHolderError
	if !errors.Is(err, datapath.ErrNotHolder) || !errors.As(err, &nh) || nh.HolderAddress != srvs[0].Addr {
		t.Fatalf("write at a server that does not hold the volume: %v; want ErrNotHolder naming %s", err, srvs[0].Addr)
	}
	if _, err := srvs[1].Store.OpenWriteSession(a.ID, "n1", ea); !errors.Is(err, datapath.ErrNotHolder) {
		t.Fatalf("write session at a server that does not hold the volume: %v; want ErrNotHolder", err)
	}

	payload := bytes.Repeat([]byte("holder"), 1000)
	for _, bulk := range []bool{true, false} {
		eng, err := client.Dial(ctx, srvs[1].Addr, srvs[1].NodeToken("n1"), client.WithServers(srvs[2].Addr, srvs[0].Addr),
			client.WithBulk(bulk), client.WithTimeout(time.Second), client.WithRetries(2))
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		off := int64(0)
		if !bulk {
			off = 1 << 16
		}
		if err := eng.WriteAt(ctx, a.ID, "n1", ea, off, payload); err != nil {
			t.Fatalf("write (bulk %v) through a server that does not hold the volume: %v", bulk, err)
		}
		if err := eng.Flush(ctx, a.ID, "n1", ea); err != nil {
			t.Fatalf("flush: %v", err)
		}
		got, err := srvs[0].Store.ReadAt(a.ID, "n1", ea, off, len(payload))
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("the holder's data after the write (bulk %v): %v", bulk, err)
		}
		if got, err := eng.ReadAt(ctx, a.ID, "n1", ea, off, len(payload)); err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("read through the client: %v", err)
		}
		if _, err := eng.GetVolume(ctx, a.ID); err != nil {
			t.Fatalf("GetVolume: %v", err)
		}
		if as, err := eng.Attachments(ctx, a.ID); err != nil || len(as) != 1 || as[0].Epoch != ea {
			t.Fatalf("Attachments: %v, %v", as, err)
		}
	}
	if _, err := ctl.GetVolume(ctx, "vol-0000000000000000"); !errors.Is(err, datapath.ErrNotFound) {
		t.Fatalf("an unknown volume: %v; want ErrNotFound", err)
	}

	// The holder stops (it led: another server leads now and holds a new volume).
	srvs[0].Stop()
	b, err := ctl.CreateVolume(ctx, "pvc-b", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatalf("create after the first leader stopped: %v", err)
	}
	eb, err := ctl.Grant(ctx, b.ID, "n1")
	if err != nil {
		t.Fatal(err)
	}
	eng, err := client.Dial(ctx, srvs[2].Addr, srvs[2].NodeToken("n1"), client.WithServers(srvs[0].Addr, srvs[1].Addr),
		client.WithTimeout(time.Second), client.WithRetries(2))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	start := time.Now()
	err = eng.WriteAt(ctx, a.ID, "n1", ea, 0, payload)
	if want := "volume " + a.ID + " is unavailable: its data is on datapath server " + srvs[0].Addr + ", which does not answer"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("write to a volume whose holder is down: %v; want an error saying %q", err, want)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the write to a volume whose holder is down took %s; want it bounded by the client's retries", took)
	}
	if _, err := eng.ReadAt(ctx, a.ID, "n1", ea, 0, 10); err == nil || !strings.Contains(err.Error(), srvs[0].Addr) {
		t.Fatalf("read of a volume whose holder is down: %v; want an error naming %s", err, srvs[0].Addr)
	}
	t.Logf("the write to a volume whose holder is down failed after %s: %v", time.Since(start), err)
	if err := eng.WriteAt(ctx, b.ID, "n1", eb, 0, payload); err != nil {
		t.Fatalf("write to a volume another server holds, its holder up: %v", err)
	}
	if got, err := eng.ReadAt(ctx, b.ID, "n1", eb, 0, len(payload)); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("read of a volume another server holds: %v", err)
	}
}

// waitApplied waits until srv's control state knows volume id.
func waitApplied(t testing.TB, srv *datapathtest.Server, id string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, _, ok := srv.Group.AppliedVolume(id); ok {
			return
		}
	}
	t.Fatalf("volume %s never applied on %s", id, srv.Addr)
}

// TestClient_Group_DialAddressDown: the server a client dials (the first
// of its list) is down. A volume another server holds is still read,
// written (both channels) and looked up through that client: the call
// that finds the first server silent asks the next one, which serves it
// or names its holder. A volume the down server holds gets an error
// within the client's retries.
func TestClient_Group_DialAddressDown(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctl, err := client.Dial(ctx, srvs[1].Addr, srvs[1].Token, client.WithServers(srvs[2].Addr, srvs[0].Addr), client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	atLeader, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token) // given no servers: the create of before, at the leader
	if err != nil {
		t.Fatal(err)
	}
	defer atLeader.Close()
	a, err := atLeader.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO) // on the first leader, srvs[0]
	if err != nil {
		t.Fatal(err)
	}
	ea, err := ctl.Grant(ctx, a.ID, "n1")
	if err != nil {
		t.Fatal(err)
	}
	srvs[0].Stop()
	b, err := ctl.CreateVolume(ctx, "pvc-b", 1<<20, datapath.AccessRWO) // on the new leader
	if err != nil {
		t.Fatal(err)
	}
	eb, err := ctl.Grant(ctx, b.ID, "n1")
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("asked"), 1000)
	for _, bulk := range []bool{true, false} {
		// Dialed to the stopped server, the others after it.
		eng, err := client.Dial(ctx, srvs[0].Addr, srvs[0].NodeToken("n1"), client.WithServers(srvs[1].Addr, srvs[2].Addr),
			client.WithBulk(bulk), client.WithTimeout(time.Second), client.WithRetries(2))
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		if _, err := eng.GetVolume(ctx, b.ID); err != nil {
			t.Fatalf("GetVolume (bulk %v) of a volume a live server holds, the Dial address down: %v", bulk, err)
		}
		if err := eng.WriteAt(ctx, b.ID, "n1", eb, 0, payload); err != nil {
			t.Fatalf("write (bulk %v) of a volume a live server holds, the Dial address down: %v", bulk, err)
		}
		if got, err := eng.ReadAt(ctx, b.ID, "n1", eb, 0, len(payload)); err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("read (bulk %v): %v", bulk, err)
		}
		start := time.Now()
		err = eng.WriteAt(ctx, a.ID, "n1", ea, 0, payload)
		if want := "volume " + a.ID + " is unavailable: its data is on datapath server " + srvs[0].Addr + ", which does not answer"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("write (bulk %v) to the volume of the down server: %v; want an error saying %q", bulk, err, want)
		}
		if took := time.Since(start); took > 15*time.Second {
			t.Fatalf("the write to the down server's volume took %s", took)
		}
	}
}
