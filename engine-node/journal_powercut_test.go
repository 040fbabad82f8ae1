package enginenode

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/vigil-storage/vigil/internal/powerfs/powerfstest"
)

// Environment of the journal writer child: its state directory, and whether
// its journal skips fdatasync (broken on purpose: the power-cut test must then
// fail).
const (
	journalChildEnv     = "VIGIL_ENGINE_JOURNAL_CHILD"
	journalBreakSyncEnv = "VIGIL_ENGINE_JOURNAL_BREAK_SYNC"
)

// runJournalChild writes, for n = 1, 2, ..., a staged record of volume vol-n
// and a published record of its target path, and prints "ACK n" once both
// calls returned, as the engine answers the kubelet's NodeStageVolume and
// NodePublishVolume only after their records are written; until killed.
func runJournalChild(dir string) int {
	j, _, err := OpenJournal(dir, "boot-1")
	if err != nil {
		fmt.Fprintln(os.Stderr, "journal child:", err)
		return 1
	}
	if os.Getenv(journalBreakSyncEnv) == "1" {
		j.db.NoSync = true
	}
	for n := 1; ; n++ {
		vol := fmt.Sprintf("vol-%d", n)
		err := j.PutStage(StageRecord{VolumeID: vol, StagingPath: "/staging/" + vol, Epoch: uint64(n), Size: 1 << 20, Phase: PhaseStaged})
		if err == nil {
			err = j.PutPublish(PublishRecord{VolumeID: vol, TargetPath: "/target/" + vol, StagingPath: "/staging/" + vol, Phase: PhasePublished})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "journal child:", err)
			return 1
		}
		fmt.Printf("ACK %d\n", n)
	}
}

// TestJournal_PowerCut_KeepsAcknowledgedRecords runs the engine's journal in
// a child process on the power-loss layer (internal/powerfs), cuts the power
// (SIGKILL of the child and the layer at once) once it acknowledged at least
// 100 stages and publishes, mounts a new layer on what was synced and checks
// that every acknowledged record is there in its acknowledged phase: after a
// power cut the engine still knows every volume it told the kubelet was
// staged or published. With VIGIL_ENGINE_JOURNAL_BREAK_SYNC=1 the journal
// skips fdatasync and this test fails.
func TestJournal_PowerCut_KeepsAcknowledgedRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	powerfstest.Require(t)
	backing, mnt := t.TempDir(), t.TempDir()
	layer := powerfstest.Start(t, backing, mnt)
	dir := filepath.Join(mnt, "engine")
	acked := powerfstest.CutMidStream(t, layer, []string{journalChildEnv + "=" + dir}, 100, "records")

	powerfstest.Start(t, backing, mnt)
	j, previous, err := OpenJournal(dir, "boot-2")
	if err != nil {
		t.Fatalf("open the journal after the power cut: %v", err)
	}
	defer j.Close()
	if previous != "boot-1" {
		t.Errorf("boot id after the power cut = %q, want boot-1", previous)
	}
	lost := 0
	for n := 1; n <= acked; n++ {
		vol := fmt.Sprintf("vol-%d", n)
		s, okS, errS := j.Stage(vol)
		p, okP, errP := j.Publish("/target/" + vol)
		if errS != nil || errP != nil {
			t.Fatal(errS, errP)
		}
		if !okS || s.Phase != PhaseStaged || s.Epoch != uint64(n) || !okP || p.Phase != PhasePublished {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged stages and publishes lost in the power cut", lost, acked)
	}
	t.Logf("%d acknowledged stages and publishes, none lost", acked)
}
