package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/sandbox"
)

// TestChaos is the suite: CHAOS_CYCLES cycles of random faults (see the package
// documentation); it fails at the first cycle with a violation, naming its seed.
func TestChaos(t *testing.T) {
	sandbox.RequireRoot(t)
	cfg, err := ConfigFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{sandbox.BinVigilManager, sandbox.BinVigilDatapath, sandbox.BinVigilEngineNode, sandbox.BinVigilSandbox} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("%s: run `make build` first (make chaos does): %v", b, err)
		}
	}
	if err := sandbox.CheckBinaries(sandbox.BinDir()); err != nil {
		t.Fatal(err)
	}
	workDir := filepath.Join(os.TempDir(), "vigil-chaos")
	lockRun(t, workDir+".lock")
	if err := sandbox.DownWorkDir(workDir); err != nil {
		t.Fatalf("remove a leftover chaos sandbox: %v", err)
	}
	t.Cleanup(func() {
		if os.Getenv(EnvKeep) != "" {
			t.Logf("%s: sandbox left in %s; bin/vigil-sandbox --workdir %s down removes it", EnvKeep, workDir, workDir)
			return
		}
		if err := sandbox.DownWorkDir(workDir); err != nil {
			t.Errorf("sandbox down: %v", err)
		}
	})
	ctx := context.Background()
	t0 := time.Now()
	setupCtx, cancel := context.WithTimeout(ctx, 8*time.Minute)
	defer cancel()
	// The power-loss layer goes under the datapath only when its power cut
	// may be drawn: every other kind runs on the data directory as before.
	wanted, err := ParseKinds(cfg.Faults, true, cfg.Servers)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Setup(setupCtx, workDir, bin, slices.Contains(wanted, DatapathPowerCut), cfg.Servers, t.Logf)
	if h != nil {
		t.Cleanup(h.Teardown)
	}
	if err != nil {
		t.Fatalf("setup: %v", err)
	}
	kinds, err := ParseKinds(cfg.Faults, h.Loop(), cfg.Servers)
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Seed: cfg.Seed, Replay: cfg.Replay, Loop: h.Loop(), Enabled: kinds, NotRun: notRun(kinds, h.Loop(), cfg.Servers),
		Setup: time.Since(t0)}
	defer func() {
		rep.Memory = h.mem.verdicts()
		writeReport(t, rep, cfg.ReportDir)
	}()
	t.Logf("chaos: seed %d, %d cycles from %v, %d datapath servers on nodes (replay one cycle: CHAOS_REPLAY=<its seed> CHAOS_FAULTS=%q %s=%d)",
		cfg.Seed, cfg.Cycles, kinds, cfg.Servers, cfg.Faults, EnvDatapathServers, cfg.Servers)
	for i := range cfg.Cycles {
		env, err := h.env(ctx)
		if err != nil {
			t.Fatalf("cycle %d: %v", i+1, err)
		}
		f, err := Draw(i+1, cfg.seedOf(i), kinds, env)
		if err != nil {
			t.Fatal(err)
		}
		t.Log(f)
		res := h.RunCycle(ctx, f)
		rep.Cycles = append(rep.Cycles, res)
		// The report so far is on disk after every cycle: a run stopped by a
		// timeout or ^C keeps the cycles it ran.
		rep.Memory = h.mem.verdicts()
		rep.Summarize()
		if _, _, err := rep.Write(cfg.ReportDir); err != nil {
			t.Errorf("write the report after cycle %d: %v", f.Cycle, err)
		}
		t.Logf("cycle %d: %s in %.1fs, recovery %s, failover %v, node return %s, %d writers, %d acknowledged records checked",
			f.Cycle, f.Kind, res.End.Sub(res.Start).Seconds(), secs(res.Recovery), res.Failover, secs(res.NodeReturn), res.Writers, res.Acked)
		if len(res.Violations) > 0 {
			ev := filepath.Join(cfg.ReportDir, fmt.Sprintf("cycle-%d-logs", f.Cycle))
			if n, err := SaveEvidence(workDir, ev); err != nil {
				t.Errorf("save the failed cycle's logs: %v", err)
			} else {
				t.Logf("cycle %d: %d logs saved in %s", f.Cycle, n, ev)
			}
			t.Fatalf("cycle %d (seed %d; replay: CHAOS_REPLAY=%d CHAOS_FAULTS=%q %s=%d): %s:\n  %s", f.Cycle, f.Seed, f.Seed,
				cfg.Faults, EnvDatapathServers, cfg.Servers, f, strings.Join(res.Violations, "\n  "))
		}
	}
}

// notRun lists the kinds a run does not draw, and why.
func notRun(enabled []Kind, loop bool, servers int) []NotRun {
	var out []NotRun
	for _, k := range AllKinds {
		switch {
		case slices.Contains(enabled, k):
		case k.NeedsServers() && servers == 0:
			out = append(out, NotRun{Kind: k, Why: fmt.Sprintf("needs the datapath as servers on nodes (%s=%d; make chaos's second run)", EnvDatapathServers, GroupServers)})
		case !k.NeedsServers() && servers > 0:
			out = append(out, NotRun{Kind: k, Why: fmt.Sprintf("runs with the one datapath server on the host (%s=0; make chaos's first run)", EnvDatapathServers)})
		case k.NeedsLoop() && !loop:
			out = append(out, NotRun{Kind: k, Why: "needs the manager's closed loop (vigil-manager run has no --datapath-token-file yet)"})
		default:
			out = append(out, NotRun{Kind: k, Why: "not in CHAOS_FAULTS"})
		}
	}
	return out
}

func writeReport(t *testing.T, rep *Report, dir string) {
	rep.Summarize()
	md, js, err := rep.Write(dir)
	if err != nil {
		t.Errorf("write report: %v", err)
		return
	}
	t.Logf("chaos report: %s and %s\n%s", md, js, rep.Markdown())
}

// lockRun makes a second run on the machine wait for the first.
func lockRun(t *testing.T, path string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Println("chaos: another run holds", path, "- waiting for it")
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			t.Fatal(err)
		}
	}
}
