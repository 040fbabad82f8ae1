package e2e

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/internal/testenv"
	"github.com/vigil-storage/vigil/sandbox"
)

// Timings of the suite's sandbox: short, so that the whole run takes minutes.
const (
	nodeMonitorGrace  = 10 * time.Second
	tolerationSeconds = 10
	podGraceSeconds   = 5
)

// sb is the sandbox every test of the package shares.
var sb *sandbox.Sandbox

// managerKubeconfig is the identity of the managers the tests start on sb:
// the ServiceAccount vigil-manager of deploy/.
var managerKubeconfig string

// standIn is registered on every node: a stand-in for the processes later work
// runs per node (vigil-engine-node, a kubelet stand-in). It records its boot id.
var standIn = sandbox.ProcessSpec{Name: "stand-in", Args: []string{"sh", "-c",
	`echo "$VIGIL_BOOT_ID" > "$VIGIL_NODE_DIR/stand-in.boot"; exec sleep 100000`}}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Outside CI a machine without root skips the suite; under CI=true or
	// VIGIL_REQUIRE_ALL=1 it fails: the suite never passes by not running.
	if code, ok := testenv.MainRequire("root", os.Geteuid() == 0,
		fmt.Sprintf("running as uid %d; the sandbox needs root (network namespaces, mounts)", os.Geteuid())); !ok {
		return code
	}
	// Tests with sandboxes of their own (TestLoop, the benchmarks) can run without
	// the shared one: VIGIL_E2E_SHARED=0 skips it (a test that reads sb then fails).
	if os.Getenv("VIGIL_E2E_SHARED") == "0" {
		fmt.Println("e2e: VIGIL_E2E_SHARED=0: no shared sandbox; only tests with sandboxes of their own can run")
		return judgeRBAC(m.Run(), false)
	}
	workDir := filepath.Join(os.TempDir(), "vigil-e2e")
	// One run at a time on a machine: a second run waits here instead of tearing
	// down the first one's sandbox as a leftover.
	lock, err := os.OpenFile(workDir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Println("e2e: another run holds", lock.Name(), "- waiting for it")
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
	}
	// A previous run that crashed may have left its sandbox: remove it first.
	if err := sandbox.DownWorkDir(workDir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: removing a leftover sandbox:", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		_ = sandbox.DownWorkDir(workDir)
		os.Exit(1)
	}()
	defer func() {
		if err := sandbox.DownWorkDir(workDir); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: sandbox down:", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	sb, err = sandbox.Up(ctx, sandbox.Config{Name: "e2e", WorkDir: workDir, Nodes: 3,
		NodeMonitorGracePeriod: nodeMonitorGrace, DefaultTolerationSeconds: tolerationSeconds,
		Subnet: "10.213.128.0/24", AuditLog: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: sandbox up:", err)
		return 1
	}
	if err := sb.ApplyDeployRBAC(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	// As an install does: a manager does not start without its CRD.
	if err := sandbox.InstallCRDs(ctx, sb.RESTConfig()); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if managerKubeconfig, err = sb.ComponentKubeconfig(ctx, vigil.ManagerServiceAccount, ""); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if err := sb.AddProcess("", standIn); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: add stand-in:", err)
		return 1
	}
	fmt.Printf("e2e: sandbox with 3 Ready nodes in %.1fs (work dir %s)\n", time.Since(t0).Seconds(), workDir)
	code := m.Run()
	if err := collectAudit(sb, "shared"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return judgeRBAC(code, wholeSuite())
}

// judgeRBAC prints the RBAC coverage of the run (rbac_coverage_test.go) and
// turns a passing run's code into 1 if it found a problem.
func judgeRBAC(code int, whole bool) int {
	problems, report := checkRBACCoverage(whole)
	fmt.Println(report)
	for _, p := range problems {
		fmt.Println("FAIL: RBAC:", p)
	}
	if len(problems) > 0 && code == 0 {
		code = 1
	}
	return code
}

// downAtEnd removes the sandbox in workDir when the test ends, or leaves it up
// for its logs when the test failed and VIGIL_E2E_KEEP is set.
func downAtEnd(t *testing.T, workDir string) {
	t.Cleanup(func() {
		if os.Getenv("VIGIL_E2E_KEEP") != "" && t.Failed() {
			t.Logf("VIGIL_E2E_KEEP: sandbox left in %s; bin/vigil-sandbox --workdir %s down removes it", workDir, workDir)
			return
		}
		if err := sandbox.DownWorkDir(workDir); err != nil {
			t.Errorf("sandbox down: %v", err)
		}
	})
}
