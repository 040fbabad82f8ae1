package datapath

import (
	"testing"
	"time"
)

// SetPrepareHold shortens PrepareHold for the test t (before any store of
// it prepares a volume).
func SetPrepareHold(t testing.TB, d time.Duration) {
	old := prepareHold
	prepareHold = d
	t.Cleanup(func() { prepareHold = old })
}
