package enginenode

import (
	"os"
	"testing"

	"github.com/vigil-storage/vigil/internal/powerfs/powerfstest"
	"github.com/vigil-storage/vigil/internal/testenv"
)

// TestMain prints, after the tests, how many were skipped for a missing
// prerequisite (testenv: in CI those fail instead). The test binary is also
// the power-loss layer and the journal writer of the power-cut test when
// started as one.
func TestMain(m *testing.M) {
	powerfstest.RunIfChild()
	if os.Getenv(guardHelperEnv) != "" {
		guardHelper() // TestGuardWriteback_ExecutesItselfOnce
	}
	if path := os.Getenv(writerEnv); path != "" {
		os.Exit(runWriterChild(path)) // TestApp_Run_RestartKeepsVolumesServed
	}
	if spec := os.Getenv(datapathChildEnv); spec != "" {
		os.Exit(runDatapathChild(spec)) // TestVolumeBackend_DatapathPowerCut_FlushLosesNoAcknowledgedWrite
	}
	if dir := os.Getenv(journalChildEnv); dir != "" {
		os.Exit(runJournalChild(dir))
	}
	os.Exit(testenv.Main(m))
}
