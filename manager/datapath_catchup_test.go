package manager

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
)

// TestCatchUp_CaughtUp is the rule of promotion: the new server answered,
// applied something, and trails the group by at most catchUpSlack entries.
func TestCatchUp_CaughtUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    catchUp
		want bool
	}{
		{"does not answer", catchUp{group: 5, joiner: 5, joinerErr: errors.New("refused")}, false},
		{"applied nothing yet", catchUp{group: 3}, false},
		{"far behind", catchUp{group: 100, joiner: 91}, false},
		{"within the slack", catchUp{group: 100, joiner: 92}, true},
		{"level", catchUp{group: 100, joiner: 100}, true},
		{"the group's servers did not say", catchUp{joiner: 4}, true},
	} {
		if got := tc.p.caughtUp(); got != tc.want {
			t.Errorf("%s: %+v caught up = %v, want %v", tc.name, tc.p, got, tc.want)
		}
	}
}

// TestWaitCaughtUp_ProgressAndTimeout: each change of progress is printed
// once; a server that catches up ends the wait, one that does not fails it
// once the wait is over, saying it stays a non-voter.
func TestWaitCaughtUp_ProgressAndTimeout(t *testing.T) {
	ctx := context.Background()
	steps := []catchUp{{group: 50, joinerErr: errors.New("connection refused")}, {group: 50, joiner: 10}, {group: 50, joiner: 10}, {group: 51, joiner: 49}}
	i := 0
	var out bytes.Buffer
	err := waitCaughtUp(ctx, &out, "dp-1", time.Minute, func(context.Context) catchUp { p := steps[min(i, len(steps)-1)]; i++; return p })
	if err != nil {
		t.Fatal(err)
	}
	want := "server dp-1 catching up: it does not answer yet (connection refused); the group is at index 50\n" +
		"server dp-1 catching up: applied 10 of the group's 50\n" +
		"server dp-1 catching up: applied 49 of the group's 51\n"
	if out.String() != want {
		t.Fatalf("printed:\n%s\nwant:\n%s", out.String(), want)
	}
	err = waitCaughtUp(ctx, &out, "dp-1", 10*time.Millisecond, func(context.Context) catchUp { return catchUp{group: 50, joiner: 3} })
	if err == nil || !strings.Contains(err.Error(), "did not catch up within 10ms (applied 3 of the group's 50)") || !strings.Contains(err.Error(), "stays in the group as a non-voter") {
		t.Fatalf("a server that does not catch up: %v", err)
	}
}

// TestDatapathAddServer_NeverCatchesUp: a "server" whose Raft address
// accepts connections and never answers is added as a non-voter, never
// catches up, and is refused as a voter: add-server fails saying so, and
// the lone server, whose majority does not count it, still commits a
// create and a fence and lists itself only.
func TestDatapathAddServer_NeverCatchesUp(t *testing.T) {
	tok := writeFile(t, "ctl", "controller-token-0123\n")
	tokens := writeFile(t, "tokens", serveTokens)
	lone := startGroupServe(t, [][]string{{"--data-dir", filepath.Join(t.TempDir(), "data"), "--token-file", tokens, "--raft-listen", freeAddr(t)}})[0]
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // read nothing, answer nothing
		}
	}()
	app, out := DatapathApp(), &bytes.Buffer{}
	app.Writer = out
	err = app.Run([]string{DatapathBinary, "add-server", "--addr", lone.addr, "--token-file", tok, "--timeout", "5s", "--catch-up-timeout", "3s",
		"--server-id", "datapath-1", "--raft-address", mute.Addr().String(), "--advertise-address", freeAddr(t)})
	if err == nil || !strings.Contains(err.Error(), "server datapath-1 did not catch up within 3s") || !strings.Contains(err.Error(), "non-voter") {
		t.Fatalf("add a server that never catches up: %v\n%s; want a refusal saying it stays a non-voter", err, out)
	}
	if !strings.Contains(out.String(), "added as a non-voter") || !strings.Contains(out.String(), "does not answer yet") {
		t.Fatalf("add-server printed:\n%s\nwant its progress", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, lone.addr, "controller-token-0123", client.WithTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := c.CreateVolume(ctx, "pvc-after", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatalf("a create after the refusal (the group must keep its majority): %v", err)
	}
	if _, err := c.Grant(ctx, v.ID, "node-1"); err != nil {
		t.Fatal(err)
	}
	if e, err := c.Fence(ctx, v.ID, "node-1"); err != nil || e != 2 {
		t.Fatalf("a fence after the refusal: epoch %d, %v; want 2", e, err)
	}
	if rep, err := c.Servers(ctx); err != nil || len(rep.Servers) != 1 {
		t.Fatalf("the group's members after the refusal: %+v, %v; want its one server", rep.Servers, err)
	}
}
