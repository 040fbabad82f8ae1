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

// OnAbandonChecked sets, for the test t, a function run between the local
// checks of an old unnamed data file and its commit as abandoned.
func OnAbandonChecked(t testing.TB, fn func(id string)) {
	old := abandonCheckedHook
	abandonCheckedHook = fn
	t.Cleanup(func() { abandonCheckedHook = old })
}

// SetMemberEpochWait shortens MemberEpochWait for the test t.
func SetMemberEpochWait(t testing.TB, d time.Duration) {
	old := memberEpochWait
	memberEpochWait = d
	t.Cleanup(func() { memberEpochWait = old })
}

// ReadDirtyMapFile reads a dirty-region map file as a server at start does.
func ReadDirtyMapFile(path string) (ranges []DirtyRange, all bool, err error) {
	d, err := openDirtyFile(path)
	if err != nil {
		return nil, false, err
	}
	defer d.close()
	return d.m.Ranges(), d.m.All(), nil
}
