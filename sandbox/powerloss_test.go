package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCutDatapathPower_WithoutLayer_Refused: a stack whose datapath does not
// run on the power-loss layer refuses the power cut (it would be a mere
// SIGKILL) and says how to get one; no stack at all is ErrNotUp.
func TestCutDatapathPower_WithoutLayer_Refused(t *testing.T) {
	dir := t.TempDir()
	s := &Sandbox{workDir: dir}
	if err := s.CutDatapathPower(); !errors.Is(err, ErrNotUp) {
		t.Errorf("CutDatapathPower without a stack = %v, want ErrNotUp", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "stack"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeStackFiles(&Stack{Dir: filepath.Join(dir, "stack")}); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"CutDatapathPower":     s.CutDatapathPower,
		"RestoreDatapathPower": func() error { return s.RestoreDatapathPower(context.Background()) },
	} {
		err := call()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "StackConfig.DatapathPowerLoss") {
			t.Errorf("%s on a stack without the layer = %v, want ErrInvalidConfig naming StackConfig.DatapathPowerLoss", name, err)
		}
	}
}
