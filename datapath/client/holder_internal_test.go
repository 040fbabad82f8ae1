package client

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
)

// TestClient_ToHolder_MovesTheVolumeAndEndsItsSessions: a NOT_HOLDER
// refusal naming another server moves the volume's calls there and ends
// every write session of that volume (their generations were opened
// elsewhere, if at all), so its next write opens a new generation at the
// holder; other volumes keep theirs. Anything else moves nothing.
func TestClient_ToHolder_MovesTheVolumeAndEndsItsSessions(t *testing.T) {
	c, err := Dial(context.Background(), "127.0.0.1:1", "token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	open := func(gen uint64) opener {
		return func(context.Context, string, string, uint64) (uint64, error) { return gen, nil }
	}
	ctx := context.Background()
	for _, k := range []struct {
		vol, node string
		gen       uint64
	}{{"vol-a", "n1", 11}, {"vol-a", "n2", 12}, {"vol-b", "n1", 13}} {
		if g, err := c.sessions.gen(ctx, sessionKey{k.vol, k.node, ""}, 1, open(k.gen)); err != nil || g != k.gen {
			t.Fatalf("open %v: %d, %v", k, g, err)
		}
	}
	refusal := func(addr string) error {
		return &datapath.RemoteError{Sentinel: datapath.ErrNotHolder, HolderAddress: addr, Message: "not here"}
	}
	for _, err := range []error{nil, errors.New("reset"), &datapath.RemoteError{Sentinel: datapath.ErrNotFound},
		refusal(""), refusal("127.0.0.1:1")} {
		if c.toHolder("vol-a", "127.0.0.1:1", err) {
			t.Fatalf("toHolder moved vol-a on %v", err)
		}
	}
	if !c.toHolder("vol-a", "127.0.0.1:1", refusal("127.0.0.1:2")) || c.holderOf("vol-a") != "127.0.0.1:2" || c.holderOf("vol-b") != "127.0.0.1:1" {
		t.Fatalf("after a refusal naming 127.0.0.1:2: vol-a at %s, vol-b at %s", c.holderOf("vol-a"), c.holderOf("vol-b"))
	}
	for _, k := range []struct {
		vol, node string
		want      uint64
	}{{"vol-a", "n1", 21}, {"vol-a", "n2", 21}, {"vol-b", "n1", 13}} {
		if g, _ := c.sessions.gen(ctx, sessionKey{k.vol, k.node, ""}, 1, open(21)); g != k.want {
			t.Errorf("%s/%s writes under generation %d after the move; want %d", k.vol, k.node, g, k.want)
		}
	}
}

// TestClient_AskElsewhere_AfterAMove: a client that followed a NOT_HOLDER
// refusal (naming another server, or naming the Dial address) before its
// Dial address stopped answering sends the calls of another volume, whose
// holder it does not know, to the next server of the group, and keeps
// doing so for the next unanswered one; it panicked on a nil map, and the
// engines of two nodes died of it at a datapath leader's power cut.
func TestClient_AskElsewhere_AfterAMove(t *testing.T) {
	const a, b, c3 = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"
	unanswered := status.Error(codes.Unavailable, "connection refused")
	refusal := func(addr string) error {
		return &datapath.RemoteError{Sentinel: datapath.ErrNotHolder, HolderAddress: addr, Message: "not here"}
	}
	for _, tc := range []struct {
		name    string
		from    string // the server that refused vol-moved
		namedAt string // the holder it named
	}{
		{"named another server", a, b},
		{"named the Dial address", b, a},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Dial(context.Background(), a, "token-0123456789", WithServers(b, c3))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if !c.toHolder("vol-moved", tc.from, refusal(tc.namedAt)) {
				t.Fatalf("toHolder did not follow a refusal from %s naming %s", tc.from, tc.namedAt)
			}
			if !c.askElsewhere("vol-other", a, unanswered) || c.holderOf("vol-other") != b {
				t.Fatalf("vol-other unanswered at the Dial address: sent to %s; want %s", c.holderOf("vol-other"), b)
			}
			if !c.askElsewhere("vol-other", b, unanswered) || c.holderOf("vol-other") != c3 {
				t.Fatalf("vol-other unanswered at %s too: sent to %s; want %s", b, c.holderOf("vol-other"), c3)
			}
			if c.askElsewhere("vol-other", c3, unanswered) {
				t.Fatalf("vol-other asked again after every server was asked")
			}
			if got := c.holderOf("vol-moved"); got != tc.namedAt {
				t.Fatalf("vol-moved now at %s; want %s (the holder named)", got, tc.namedAt)
			}
		})
	}
}
