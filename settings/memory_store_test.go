package settings_test

import (
	"testing"

	"github.com/vigil-storage/vigil/settings"
	"github.com/vigil-storage/vigil/settings/settingstest"
)

func TestMemoryStore_Conformance(t *testing.T) {
	settingstest.RunStoreConformance(t, settingstest.Backend{
		New: func(*testing.T) func(*testing.T) settings.Store {
			return func(*testing.T) settings.Store { return settings.NewMemoryStore() }
		},
	})
}
