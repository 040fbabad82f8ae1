package enginenode

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/engine-node/fdkeeper"
)

func TestKeeperCommand_BadArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"fd-keeper", "--socket", ""}, "--socket is empty"},
		{[]string{"fd-keeper", "--socket", "/tmp/x.sock", "extra"}, "takes no arguments"},
	} {
		app := App(nil)
		app.Writer, app.ErrWriter = io.Discard, io.Discard
		err := app.Run(append([]string{"vigil-engine-node"}, tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

// TestKeeperCommand_ServesUntilStopped runs `fd-keeper` and lists through its
// socket; a second listener on the same socket is refused while it runs.
func TestKeeperCommand_ServesUntilStopped(t *testing.T) {
	dir, err := os.MkdirTemp("", "vkc") // a socket path must fit in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "sub", "k.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		app := App(nil)
		app.Writer, app.ErrWriter = io.Discard, io.Discard
		done <- app.RunContext(ctx, []string{"vigil-engine-node", "fd-keeper", "--socket", sock})
	}()
	c := fdkeeper.Client{Path: sock}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if list, err := c.List(); err == nil {
			if len(list) != 0 {
				t.Fatalf("a new keeper holds %v", list)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the keeper never answered on its socket")
		}
	}
	// (Not a second App run: urfave/cli's global help flag is not safe for
	// two apps at once.)
	if l, err := fdkeeper.Listen(sock); err == nil || !strings.Contains(err.Error(), "another fd keeper") {
		if l != nil {
			l.Close()
		}
		t.Fatalf("a second keeper on a live socket: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("keeper after its context ended: %v", err)
	}
}
