package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/datapath"
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

// The datapath's machine on the power-loss layer has a boot id file of its
// own that the datapath accepts, and each boot (the stack's start, each
// restore after a cut) writes a new one; without the layer the datapath
// reads the host's.
func TestBootDatapathMachine_NewValidBootIDEachBoot(t *testing.T) {
	stk := &Stack{Dir: t.TempDir()}
	if args := datapathBootArgs(StackConfig{}, stk); args != nil {
		t.Fatalf("without the layer: %q, want no flag (the host's boot id)", args)
	}
	args := datapathBootArgs(StackConfig{DatapathPowerLoss: true}, stk)
	if len(args) != 2 || args[0] != "--boot-id-file" || args[1] != datapathBootIDFile(stk) {
		t.Fatalf("with the layer: %q", args)
	}
	seen := map[string]bool{}
	for range 3 {
		if err := bootDatapathMachine(stk); err != nil {
			t.Fatal(err)
		}
		id, err := datapath.ReadBootID(args[1])
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatalf("boot id %s given twice", id)
		}
		seen[id] = true
	}
}
