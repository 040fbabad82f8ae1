package ociimage

import (
	"os"
	"testing"

	"github.com/vigil-storage/vigil/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
