package enginenode

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/internal/powerfs/powerfstest"
)

// datapathChildEnv, set to "DIR ADDR BOOT", turns the test binary into a
// datapath server on DIR listening at ADDR that reports the boot id BOOT.
const datapathChildEnv = "VIGIL_ENGINE_DATAPATH_CHILD"

const (
	childControllerToken = "replay-controller-token"
	childNodeToken       = "replay-node-a-token-xyz"
)

func runDatapathChild(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "datapath child: %s=%q: want DIR ADDR BOOT\n", datapathChildEnv, spec)
		return 2
	}
	store, err := datapath.Open(f[0], datapath.Options{Capacity: 1 << 30})
	if err != nil {
		fmt.Fprintln(os.Stderr, "datapath child:", err)
		return 1
	}
	tokens, err := datapath.ParseTokens(strings.NewReader("controller "+childControllerToken+"\nnode node-a "+childNodeToken+"\n"), "replay")
	if err != nil {
		fmt.Fprintln(os.Stderr, "datapath child:", err)
		return 1
	}
	srv, err := datapath.NewServer(store, tokens, datapath.WithBootID(f[2]))
	if err != nil {
		fmt.Fprintln(os.Stderr, "datapath child:", err)
		return 1
	}
	lis, err := net.Listen("tcp", f[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "datapath child:", err)
		return 1
	}
	fmt.Println("READY")
	if err := srv.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, "datapath child:", err)
		return 1
	}
	return 0
}

// startDatapathChild runs a datapath server child on dir at addr, whose
// machine has the boot id boot, and returns once it listens.
func startDatapathChild(t *testing.T, dir, addr, boot string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), datapathChildEnv+"="+dir+" "+addr+" "+boot)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "READY\n" {
		t.Fatalf("datapath child did not start: %q, %v", line, err)
	}
	return cmd
}

// TestVolumeBackend_DatapathPowerCut_FlushLosesNoAcknowledgedWrite runs the
// engine's volume backend against a real datapath server whose data lives on
// the power-loss layer. Writes are acknowledged (some flushed, the last ones
// not), the datapath's machine loses power (the layer and the server
// SIGKILLed: what was not fsynced is gone) and comes back with a new boot id,
// and the backend's next flush succeeds. Then every acknowledged write must
// be durable: a second cut, and a plain client reads them all back. Without
// the kept writes sent again, the flush answered by the new boot would cover
// nothing of what the cut lost.
func TestVolumeBackend_DatapathPowerCut_FlushLosesNoAcknowledgedWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	powerfstest.Require(t)
	ctx := context.Background()
	backing, mnt := t.TempDir(), t.TempDir()
	layer := powerfstest.Start(t, backing, mnt)
	data := filepath.Join(mnt, "data")
	addr := freePort(t)
	server := startDatapathChild(t, data, addr, "boot-1")
	cut := func(boot string) {
		powerfstest.Cut(t, layer, server)
		layer = powerfstest.Start(t, backing, mnt)
		server = startDatapathChild(t, data, addr, boot)
	}
	ctl, err := client.Dial(ctx, addr, childControllerToken)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	eng, err := client.Dial(ctx, addr, childNodeToken, client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	const size, blk = 4 << 20, 64 << 10
	v, err := ctl.CreateVolume(ctx, "pvc-replay", size, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := ctl.Grant(ctx, v.ID, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	b := newVolumeBackend(eng, v.ID, "node-a", epoch, 30*time.Second, NewMetrics(nil)).keepUnflushed(DefaultUnflushedBudget, nil)
	want := make([]byte, size)
	write := func(from, to int, c byte) {
		t.Helper()
		for i := from; i < to; i++ {
			p := bytes.Repeat([]byte{c + byte(i%16)}, blk)
			if err := b.WriteAt(ctx, int64(i)*blk, p); err != nil {
				t.Fatal(err)
			}
			copy(want[i*blk:], p)
		}
	}
	write(0, 32, 'a')
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	write(16, 48, 'A') // acknowledged; no flush before the cut
	cut("boot-2")
	if err := b.Flush(ctx); err != nil {
		t.Fatalf("the first flush after the datapath's power cut: %v", err)
	}
	cut("boot-3")
	got, err := eng.ReadAt(ctx, v.ID, "node-a", epoch, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	if i := firstDiff(got, want); i < size {
		t.Fatalf("a flush after the power cut succeeded, yet after the next cut block %d holds %q..., want %q... "+
			"(acknowledged writes lost across the datapath's reboot)", i/blk, got[i:i+4], want[i:i+4])
	}
}
