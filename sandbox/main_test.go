package sandbox

import (
	"os"
	"testing"

	"github.com/vigil-storage/vigil/internal/testenv"
)

// TestMain prints, after the tests, how many were skipped for a missing
// prerequisite (testenv: in CI those fail instead).
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
