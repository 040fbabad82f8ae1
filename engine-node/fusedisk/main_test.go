package fusedisk

import (
	"os"
	"testing"

	"github.com/vigil-storage/vigil/internal/testenv"
)

// TestMain prints, after the tests, how many were skipped for a missing
// prerequisite (testenv: in CI those fail instead). Started with childEnv
// set, the binary plays a part of the handover test instead.
func TestMain(m *testing.M) {
	if part := os.Getenv(childEnv); part != "" {
		os.Exit(runChild(part))
	}
	os.Exit(testenv.Main(m))
}
