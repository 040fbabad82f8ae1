package enginenode_test

import (
	"fmt"
	"os"

	enginenode "github.com/vigil-storage/vigil/engine-node"
)

// The journal remembers stages across restarts and tells a reboot (a new boot
// id) from a restart; the new boot id is recorded only when the caller says
// nothing of the earlier boot is left (RecordBoot).
func ExampleOpenJournal() {
	dir, _ := os.MkdirTemp("", "journal")
	defer os.RemoveAll(dir)

	j, previous, _ := enginenode.OpenJournal(dir, "boot-1")
	_ = j.PutStage(enginenode.StageRecord{VolumeID: "vol-1", StagingPath: "/staging/vol-1", Epoch: 3, Phase: enginenode.PhaseStaged})
	j.Close()
	fmt.Printf("first start: previous boot %q\n", previous)

	j, previous, _ = enginenode.OpenJournal(dir, "boot-2")
	defer j.Close()
	rec, _, _ := j.Stage("vol-1")
	fmt.Printf("after a reboot: previous boot %q, vol-1 staged at epoch %d in %s\n", previous, rec.Epoch, rec.Boot)
	_ = j.DeleteStage("vol-1") // cleaned up after the reboot
	_ = j.RecordBoot()
	recorded, _ := j.RecordedBoot()
	fmt.Printf("cleaned up: the journal's boot is %s\n", recorded)
	// Output:
	// first start: previous boot ""
	// after a reboot: previous boot "boot-1", vol-1 staged at epoch 3 in boot-1
	// cleaned up: the journal's boot is boot-2
}
