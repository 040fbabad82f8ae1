package datapath_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/internal/powerfs/powerfstest"
)

// breakFlushEnv set to 1 breaks the child server's durability on purpose:
// its volumes' flushes succeed without syncing anything (their data files'
// Datasync does nothing). The power-cut test must then fail; a SIGKILL alone
// would not notice.
const breakFlushEnv = "VIGIL_DATAPATH_CRASH_BREAK_FLUSH"

// powerCutRoundsEnv asks the power-cut test for more rounds than its default
// (up to crashNodes).
const powerCutRoundsEnv = "VIGIL_DATAPATH_POWERCUT_ROUNDS"

// noDatasync is a data file whose Datasync is a lie.
type noDatasync struct{ datapath.File }

func (noDatasync) Datasync() error { return nil }

func openNoDatasync(name string, flag int, perm os.FileMode) (datapath.File, error) {
	f, err := datapath.OpenOSFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noDatasync{f}, nil
}

// TestServer_PowerCut_LosesNoFlushedWrite is the crash test with the power
// cut instead of a process kill: the server's data directory lives on the
// power-loss layer (internal/powerfs), and each cut SIGKILLs the server and
// the layer at once, so everything the server wrote but did not fsync is
// gone, page cache included. Then the dead mount is detached, a new layer is
// mounted on the same backing directory and a new server started on it.
// Every flushed write must be there; every acknowledged fence and grant too
// (the fenced node is refused, the live grant has its epoch), and epochs never
// go back.
func TestServer_PowerCut_LosesNoFlushedWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	powerfstest.Require(t)
	rounds := 3
	if v := os.Getenv(powerCutRoundsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > crashNodes {
			t.Fatalf("%s=%q: want a number of rounds from 1 to %d", powerCutRoundsEnv, v, crashNodes)
		}
		rounds = n
	}
	backing, mnt := t.TempDir(), t.TempDir()
	layer := powerfstest.Start(t, backing, mnt)
	data := filepath.Join(mnt, "data")
	start := func() *child { return startChild(t, data) }
	cut := func(ch *child) {
		powerfstest.Cut(t, layer, ch.cmd)
		layer = powerfstest.Start(t, backing, mnt)
	}
	crashRounds(t, rounds, start, cut)
	if _, err := os.Stat(filepath.Join(backing, "data", "datapath.db")); err != nil {
		t.Fatal(fmt.Errorf("the server's data did not live on the layer's backing directory: %w", err))
	}
}
