package datapath_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/internal/powerfs/powerfstest"
)

// childEnv, when set to a data directory, turns the test binary into a
// datapath server (see TestMain); the crash test runs it as a child process.
const childEnv = "VIGIL_DATAPATH_CRASH_CHILD"

// crashTokens is the child server's tokens file: the controller and the
// engines of the crashNodes nodes the rounds grant to, each with its own token.
const crashTokens = `controller crash-controller-token
node node-1 crash-node-1-token-x
node node-2 crash-node-2-token-x
node node-3 crash-node-3-token-x
node node-4 crash-node-4-token-x
node node-5 crash-node-5-token-x
node node-6 crash-node-6-token-x
node node-7 crash-node-7-token-x
node node-8 crash-node-8-token-x
`

// crashNodes is how many nodes crashTokens knows: a crash test runs at most
// that many rounds.
const crashNodes = 8

func TestMain(m *testing.M) {
	powerfstest.RunIfChild()
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(runChild(dir))
	}
	os.Exit(m.Run())
}

func runChild(dir string) int {
	opts := datapath.Options{Capacity: 1 << 30}
	if os.Getenv(breakFlushEnv) == "1" {
		opts.OpenFile = openNoDatasync
	}
	store, err := datapath.Open(dir, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	tokens, err := datapath.ParseTokens(strings.NewReader(crashTokens), "crash")
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	srv, err := datapath.NewServer(store, tokens)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	fmt.Printf("ADDR %s\n", lis.Addr())
	if err := srv.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

type child struct {
	cmd  *exec.Cmd
	addr string
}

func startChild(t *testing.T, dir string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	if err != nil || !ok {
		t.Fatalf("child did not report its address: %q, %v", line, err)
	}
	return &child{cmd: cmd, addr: addr}
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
}

// TestServer_Crash_SIGKILLLosesNoFlushedWrite runs the server as a child
// process, writes with periodic flushes while another node is fenced, kills it
// with SIGKILL mid-stream once it has acknowledged a number of flushed writes,
// restarts it, and checks that every flushed write is there, epochs did not go
// backwards, the fence is remembered and the metadata is intact. It repeats
// for several rounds on the same data directory.
func TestServer_Crash_SIGKILLLosesNoFlushedWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	dir := t.TempDir()
	crashRounds(t, 4, func() *child { return startChild(t, dir) }, func(ch *child) { ch.kill(t) })
}

// crashRounds is the body of the crash tests: rounds times, it fences the
// last round's node, grants the volume to a new node, writes with flushes
// until cut kills the server mid-stream, starts it again and checks what
// was acknowledged. start runs a server on the same data as every time
// before; cut kills it (and whatever else the crash takes down).
func crashRounds(t *testing.T, rounds int, start func() *child, cut func(*child)) {
	ctx := context.Background()
	ch := start()
	c := dialCrash(t, ch.addr)
	vol, err := c.ctl.CreateVolume(ctx, "crash", 16<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	flushed := make([]int64, 16<<20/4096) // block -> stamp of the last flushed write (0: none)
	var maxEpoch uint64
	zombie := ""
	var zombieEpoch uint64
	for round := 1; round <= rounds; round++ {
		node := fmt.Sprintf("node-%d", round)
		if zombie != "" {
			e, err := c.ctl.Fence(ctx, vol.ID, zombie)
			if err != nil || e <= maxEpoch {
				t.Fatalf("round %d: Fence(%s) = %d, %v; want > %d", round, zombie, e, err, maxEpoch)
			}
			maxEpoch = e
		}
		epoch, err := c.ctl.Grant(ctx, vol.ID, node)
		if err != nil || epoch <= maxEpoch {
			t.Fatalf("round %d: Grant(%s) = %d, %v; want > %d", round, node, epoch, err, maxEpoch)
		}
		maxEpoch = epoch
		stopped := writeUntilKilled(t, c, vol.ID, node, epoch, int64(round), flushed, func() { cut(ch) })
		t.Logf("round %d: %d writes acknowledged before the crash", round, stopped)
		_ = c.Close()

		ch = start()
		c = dialCrash(t, ch.addr)
		checkAfterRestart(t, c, vol, node, epoch, flushed)
		if zombie != "" {
			err := c.as(zombie).WriteAt(ctx, vol.ID, zombie, zombieEpoch, 0, []byte("zombie"))
			if !errors.Is(err, datapath.ErrFenced) {
				t.Fatalf("round %d: fenced %s writes after restart: %v", round, zombie, err)
			}
		}
		zombie, zombieEpoch = node, epoch
	}
	_ = c.Close()
}

// crashClients are the test's connections to one child: the controller's and
// one per node, each with its own token.
type crashClients struct {
	ctl   *client.Client
	nodes map[string]*client.Client
}

func (c *crashClients) as(node string) *client.Client { return c.nodes[node] }

func (c *crashClients) Close() error {
	for _, n := range c.nodes {
		_ = n.Close()
	}
	return c.ctl.Close()
}

func dialCrash(t *testing.T, addr string) *crashClients {
	t.Helper()
	dial := func(tok string) *client.Client {
		c, err := client.Dial(context.Background(), addr, tok)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	out := &crashClients{ctl: dial("crash-controller-token"), nodes: map[string]*client.Client{}}
	for i := 1; i <= crashNodes; i++ {
		n := fmt.Sprintf("node-%d", i)
		out.nodes[n] = dial(fmt.Sprintf("crash-%s-token-x", n))
	}
	return out
}

// minFlushedBeforeKill is how many flushes (of 8 writes each) the server must
// have acknowledged in a round before the test kills it: a round that
// acknowledged nothing would test nothing.
const minFlushedBeforeKill = 16

// writeUntilKilled writes 4 KiB blocks stamped with (round, sequence),
// flushing every 8 writes and recording what each successful flush covered.
// Once minFlushedBeforeKill flushes were acknowledged it calls kill (which
// kills the child) without stopping the writer first, and returns the writes
// acknowledged.
func writeUntilKilled(t *testing.T, c *crashClients, id, node string, epoch uint64, round int64, flushed []int64, kill func()) int {
	ctx := context.Background()
	var done atomic.Bool
	acked := make(chan int, 1)
	ready := make(chan struct{}) // closed after minFlushedBeforeKill flushes
	pending := map[int]int64{}
	go func() {
		n, flushes := 0, 0
		buf := make([]byte, 4096)
		for seq := int64(1); ; seq++ {
			blk := int((seq*7919 + round*31) % int64(len(flushed)))
			stamp := round<<32 | seq
			for i := 0; i < len(buf); i += 8 {
				binary.LittleEndian.PutUint64(buf[i:], uint64(stamp))
			}
			if err := c.as(node).WriteAt(ctx, id, node, epoch, int64(blk)*4096, buf); err != nil {
				break
			}
			n++
			pending[blk] = stamp
			if seq%8 == 0 {
				if err := c.as(node).Flush(ctx, id, node, epoch); err != nil {
					break
				}
				for b, s := range pending {
					flushed[b] = s
				}
				clear(pending)
				if flushes++; flushes == minFlushedBeforeKill {
					close(ready)
				}
			}
			if done.Load() {
				break
			}
		}
		acked <- n
	}()
	select {
	case <-ready:
	case n := <-acked:
		t.Fatalf("round %d: the writer stopped after %d acknowledged writes, before %d flushes were acknowledged", round, n, minFlushedBeforeKill)
	case <-time.After(2 * time.Minute):
		t.Fatalf("round %d: %d flushes not acknowledged within 2 minutes", round, minFlushedBeforeKill)
	}
	kill() // mid-stream: the writer is still going
	done.Store(true)
	n := <-acked
	if n < 8*minFlushedBeforeKill {
		t.Fatalf("round %d: %d writes acknowledged before the kill, want at least %d", round, n, 8*minFlushedBeforeKill)
	}
	return n
}

func checkAfterRestart(t *testing.T, c *crashClients, vol datapath.Volume, node string, epoch uint64, flushed []int64) {
	t.Helper()
	ctx := context.Background()
	got, err := c.ctl.GetVolume(ctx, vol.ID)
	if err != nil || got != vol {
		t.Fatalf("metadata after restart: %+v, %v; want %+v", got, err, vol)
	}
	if vs, err := c.ctl.ListVolumes(ctx); err != nil || len(vs) != 1 {
		t.Fatalf("ListVolumes after restart: %+v, %v", vs, err)
	}
	// The live grant survived with the same epoch (idempotent Grant).
	if e, err := c.ctl.Grant(ctx, vol.ID, node); err != nil || e != epoch {
		t.Fatalf("Grant(%s) after restart = %d, %v; want the same epoch %d", node, e, err, epoch)
	}
	var data []byte
	for off := int64(0); off < vol.Size; off += datapath.MaxIOSize {
		p, err := c.as(node).ReadAt(ctx, vol.ID, node, epoch, off, int(min(datapath.MaxIOSize, vol.Size-off)))
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, p...)
	}
	lost, checked := 0, 0
	for blk, want := range flushed {
		if want == 0 {
			continue
		}
		checked++
		// A later unflushed write to the same block may also have landed; it
		// carries a larger stamp.
		if have := int64(binary.LittleEndian.Uint64(data[blk*4096:])); have < want {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d flushed blocks lost or rolled back by the crash", lost, checked)
	}
	if checked == 0 {
		t.Fatal("no flushed block to check: the round tested nothing")
	}
}
