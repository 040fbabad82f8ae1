package images_test

import (
	"os"
	"testing"

	"github.com/vigil-storage/vigil/internal/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.Main(m)
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}
