package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vigil-storage/vigil/internal/powerfs"
)

// StackPowerFS is the host process that holds the datapath's data directory
// when StackConfig.DatapathPowerLoss is set: `vigil-sandbox powerfs`, a FUSE
// layer that keeps what the datapath wrote and did not fsync in its own
// memory only (see internal/powerfs).
const StackPowerFS = "datapath-powerfs"

// datapathSyncedDir is the layer's backing directory under the stack's
// directory; the layer is mounted on the datapath's data directory itself.
const datapathSyncedDir = "datapath-synced"

// startPowerFS starts the layer under the datapath's data directory when the
// stack asks for it, and returns once it serves.
func (s *Sandbox) startPowerFS(ctx context.Context, cfg StackConfig, stk *Stack) error {
	if !cfg.DatapathPowerLoss {
		return nil
	}
	if err := os.MkdirAll(stk.DatapathSynced, 0o700); err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	if err := bootDatapathMachine(stk); err != nil {
		return err
	}
	err := s.startHost(stk, ProcessSpec{Name: StackPowerFS, Args: []string{filepath.Join(cfg.VigilBinDir, BinVigilSandbox), "powerfs",
		"--backing", stk.DatapathSynced, datapathDir(stk)}})
	if err != nil {
		return err
	}
	return waitPowerFS(ctx, datapathDir(stk))
}

func datapathDir(stk *Stack) string { return filepath.Join(stk.Dir, "datapath") }

// datapathBootIDFile is the boot id of the datapath's machine when it runs on
// the power-loss layer: each power cut boots it with a new one, as a real
// reboot does, while a restart of the datapath's process keeps it.
func datapathBootIDFile(stk *Stack) string { return filepath.Join(stk.Dir, "datapath-boot_id") }

// datapathBootArgs are the datapath's flags for its machine's boot id: its
// own file on the power-loss layer, the host's otherwise.
func datapathBootArgs(cfg StackConfig, stk *Stack) []string {
	if !cfg.DatapathPowerLoss {
		return nil
	}
	return []string{"--boot-id-file", datapathBootIDFile(stk)}
}

// bootDatapathMachine gives the datapath's machine a new boot id.
func bootDatapathMachine(stk *Stack) error {
	if err := os.WriteFile(datapathBootIDFile(stk), []byte(newBootID()+"\n"), 0o644); err != nil {
		return fmt.Errorf("boot id of the datapath's machine: %w", err)
	}
	return nil
}

func waitPowerFS(ctx context.Context, mnt string) error {
	return Poll(ctx, 30*time.Second, "the power-loss layer mounted at "+mnt, func(context.Context) (bool, string, error) {
		on, err := powerfs.Mounted(mnt)
		return on, "not mounted yet", err
	}, nil)
}

// CutDatapathPower is a power cut of the datapath's machine: SIGKILL of the
// datapath and of the power-loss layer under its data directory at once, so
// that whatever the datapath wrote and did not fsync is gone, then the dead
// mount is detached. Nothing runs again until RestoreDatapathPower. It needs
// a stack started with StackConfig.DatapathPowerLoss.
func (s *Sandbox) CutDatapathPower() error {
	stk, err := s.powerLossStack()
	if err != nil {
		return err
	}
	err = s.withState(func(st *state) error {
		_, layer, err := st.findProc("", StackPowerFS)
		if err != nil {
			return err
		}
		_, dp, err := st.findProc("", StackDatapath)
		if err != nil {
			return err
		}
		return killAll([]*proc{dp, layer}, 5*time.Second)
	})
	if err != nil {
		return err
	}
	return powerfs.Detach(datapathDir(stk))
}

// RestoreDatapathPower brings the datapath's machine back after
// CutDatapathPower: a new boot id for the machine (the datapath reports it,
// so engines know their unflushed writes may be gone and send them again), a
// new layer on the same backing directory, then the datapath on it. It returns once the datapath's process started (not once
// it answers).
func (s *Sandbox) RestoreDatapathPower(ctx context.Context) error {
	stk, err := s.powerLossStack()
	if err != nil {
		return err
	}
	if err := powerfs.Detach(datapathDir(stk)); err != nil {
		return err
	}
	if err := bootDatapathMachine(stk); err != nil {
		return err
	}
	if err := s.StartProcess("", StackPowerFS); err != nil {
		return err
	}
	if err := waitPowerFS(ctx, datapathDir(stk)); err != nil {
		return err
	}
	return s.StartProcess("", StackDatapath)
}

// powerLossStack is the running stack, refused when its datapath does not
// run on the power-loss layer.
func (s *Sandbox) powerLossStack() (*Stack, error) {
	stk, err := s.Stack()
	if err != nil {
		return nil, err
	}
	if stk.DatapathSynced == "" {
		return nil, fmt.Errorf("%w: the stack's datapath does not run on the power-loss layer, so a power cut of it would keep the page cache: start the stack with StackConfig.DatapathPowerLoss", ErrInvalidConfig)
	}
	return stk, nil
}
