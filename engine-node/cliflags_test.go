package enginenode

import (
	"testing"

	"github.com/vigil-storage/vigil/internal/cliflags"
)

// TestApp_FlagsAnywhere: every flag of every command is read after an
// argument too.
func TestApp_FlagsAnywhere(t *testing.T) {
	if err := cliflags.Check(App(nil)); err != nil {
		t.Fatal(err)
	}
}
