package enginenode

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Environment of the engine helper process (TestHelperEngine).
const (
	engineStateEnv   = "VIGIL_TEST_ENGINE_STATE"
	engineImagesEnv  = "VIGIL_TEST_ENGINE_IMAGES"
	engineStagingEnv = "VIGIL_TEST_ENGINE_STAGING"
	engineTargetEnv  = "VIGIL_TEST_ENGINE_TARGET"
	engineStallEnv   = "VIGIL_TEST_ENGINE_STALL" // "read", "write" or "" (no stall)
)

// TestHelperEngine is not a test: with engineStateEnv set it is an engine
// process that stages vol-k (and publishes it when a target is given), prints
// "stalled" when the datapath stops answering in the middle of the stage or
// "served" once done, and then waits to be killed.
func TestHelperEngine(t *testing.T) {
	state := os.Getenv(engineStateEnv)
	if state == "" {
		t.Skip("helper process for the SIGKILL recovery tests")
	}
	dp := newFakeDatapathIn(t, os.Getenv(engineImagesEnv))
	dp.create(t, "vol-k", testSize)
	epoch := dp.grant("vol-k", "node-a")
	switch os.Getenv(engineStallEnv) {
	case "read":
		dp.stallAfter = 0
	case "write":
		dp.stallWrite = true
	}
	n, err := NewNodeServer(context.Background(), Config{
		NodeName: "node-a", StateDir: state, BootID: "boot-1", Datapath: dp, IOTimeout: time.Hour, Log: quiet,
	})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	staging, target := os.Getenv(engineStagingEnv), os.Getenv(engineTargetEnv)
	go func() {
		<-dp.stalled
		fmt.Println("stalled")
	}()
	ctx := context.Background()
	if _, err := n.NodeStageVolume(ctx, stageReq("vol-k", staging, epoch, mountCap())); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if target != "" {
		if _, err := n.NodePublishVolume(ctx, publishReq("vol-k", staging, target, mountCap())); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		if err := writeAndSync(filepath.Join(target, "before-kill"), []byte("kept")); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
	}
	fmt.Println("served")
	select {}
}

// killEngineAt runs the helper engine and SIGKILLs it when it prints want.
func killEngineAt(t *testing.T, want string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperEngine$")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // mkfs and blkid children too
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if line := lines.Text(); line == want {
			break
		} else if strings.HasPrefix(line, "error") || line == "served" || line == "stalled" {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			t.Fatalf("helper engine said %q, want %q", line, want)
		}
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The next engine's recovery aborts a FUSE connection the killed one left
	// stuck; only then can the killed process finish exiting.
	t.Cleanup(func() { _ = cmd.Wait() })
}

type killCase struct {
	state, images, staging, target string
}

func newKillCase(t *testing.T, publish bool) killCase {
	c := killCase{state: t.TempDir(), images: t.TempDir(), staging: t.TempDir()}
	if publish {
		c.target = filepath.Join(t.TempDir(), "m")
	}
	return c
}

func (c killCase) env(stall string) []string {
	return []string{engineStateEnv + "=" + c.state, engineImagesEnv + "=" + c.images,
		engineStagingEnv + "=" + c.staging, engineTargetEnv + "=" + c.target, engineStallEnv + "=" + stall}
}

// restart starts the engine again on the killed one's state directory.
func (c killCase) restart(t *testing.T, bootID string) (*NodeServer, *fakeDatapath, uint64) {
	dp := newFakeDatapathIn(t, c.images)
	dp.create(t, "vol-k", testSize)
	epoch := dp.grant("vol-k", "node-a") // the same epoch the killed engine got
	return newTestServerIn(t, dp, "node-a", c.state, bootID), dp, epoch
}

func TestNodeServer_Recover_SIGKILLMidStage(t *testing.T) {
	requireRealStack(t)
	for _, stall := range []string{"read", "write"} {
		t.Run("stalled on "+stall, func(t *testing.T) {
			c := newKillCase(t, false)
			if stall == "write" { // format first, so the first write is the mount's
				killEngineAt(t, "served", c.env("")...)
				n, _, _ := c.restart(t, "boot-1")
				cleanupServer(t, n)
			}
			killEngineAt(t, "stalled", c.env(stall)...)
			n, _, epoch := c.restart(t, "boot-1")
			if rec, ok, _ := n.journal.Stage("vol-k"); ok {
				t.Fatalf("a stage cut short survived recovery: %+v", rec)
			}
			assertNothingLeaked(t, c.state)
			if _, m, _ := mountAt(c.staging); m {
				t.Fatal("staging path still mounted")
			}
			if _, err := n.NodeStageVolume(context.Background(), stageReq("vol-k", c.staging, epoch, mountCap())); err != nil {
				t.Fatalf("stage after recovery: %v", err)
			}
		})
	}
}

func TestNodeServer_Recover_RestartServesAgain(t *testing.T) {
	requireRealStack(t)
	c := newKillCase(t, true)
	killEngineAt(t, "served", c.env("")...)
	start := time.Now()
	n, _, epoch := c.restart(t, "boot-1")
	t.Logf("restart after SIGKILL, volume served and published again in %v", time.Since(start))
	rec, ok, _ := n.journal.Stage("vol-k")
	if !ok || rec.Phase != PhaseStaged || n.live("vol-k") == nil {
		t.Fatalf("stage after restart: %+v, live=%v", rec, n.live("vol-k") != nil)
	}
	if got, err := os.ReadFile(filepath.Join(c.target, "before-kill")); err != nil || string(got) != "kept" {
		t.Fatalf("file through the target after restart: %q, %v", got, err)
	}
	if v := testutil.ToFloat64(n.metrics.cleanups.WithLabelValues(CleanupReserved)); v != 1 {
		t.Fatalf("cleanup_total{outcome=reserved} = %v, want 1", v)
	}
	ctx := context.Background()
	if _, err := n.NodeStageVolume(ctx, stageReq("vol-k", c.staging, epoch, mountCap())); err != nil {
		t.Fatalf("idempotent stage after restart: %v", err)
	}
	if _, err := n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-k", TargetPath: c.target}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "vol-k", StagingTargetPath: c.staging}); err != nil {
		t.Fatal(err)
	}
	assertNothingLeaked(t, c.state)
}

func TestNodeServer_Recover_RebootCleansEverything(t *testing.T) {
	requireRealStack(t)
	c := newKillCase(t, true)
	killEngineAt(t, "served", c.env("")...)
	n, _, _ := c.restart(t, "boot-2")
	stages, _ := n.journal.Stages()
	pubs, _ := n.journal.Publishes()
	if len(stages)+len(pubs) != 0 {
		t.Fatalf("after a reboot the journal still holds %+v %+v", stages, pubs)
	}
	if exists(c.target) {
		t.Fatal("target path of the previous boot left behind")
	}
	if _, m, _ := mountAt(c.staging); m {
		t.Fatal("staging path of the previous boot still mounted")
	}
	assertNothingLeaked(t, c.state)
	if v := testutil.ToFloat64(n.metrics.cleanups.WithLabelValues(CleanupCleaned)); v < 2 {
		t.Fatalf("cleanup_total{outcome=cleaned} = %v, want ≥ 2", v)
	}
}

// A reboot's cleanup that fails is not forgotten: the boot id is recorded only
// once nothing of the earlier boot is left, so the next start in the same
// boot cleans up after the reboot again instead of serving the earlier boot's
// stage as after a restart. A stage made in the new boot meanwhile is served
// again like after any restart.
func TestNodeServer_Recover_FailedRebootCleanupRetriedNextStart(t *testing.T) {
	requireRealStack(t)
	state := t.TempDir()
	dp := newFakeDatapath(t)
	dp.create(t, "vol-new", testSize)
	epoch := dp.grant("vol-new", "node-a")

	// boot-1 left vol-old staged; something in its disk directory makes its
	// removal fail.
	j, _, err := OpenJournal(state, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	old := StageRecord{VolumeID: "vol-old", StagingPath: t.TempDir(), Epoch: 3, Size: testSize,
		DiskDir: diskDir(state, "vol-old"), Phase: PhaseStaged}
	if err := j.PutStage(old); err != nil {
		t.Fatal(err)
	}
	j.Close()
	blocker := filepath.Join(old.DiskDir, "blocker")
	if err := os.MkdirAll(old.DiskDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blocker, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	// First start in boot-2: the cleanup fails; meanwhile vol-new is staged.
	n, err := NewNodeServer(context.Background(), Config{NodeName: "node-a", StateDir: state, BootID: "boot-2",
		Datapath: dp, IOTimeout: 5 * time.Second, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := n.journal.Stage("vol-old"); !ok {
		t.Fatal("vol-old's record is gone although its cleanup failed")
	}
	if b, _ := n.journal.RecordedBoot(); b != "boot-1" {
		t.Fatalf("journal records boot %q after a failed cleanup; want boot-1 still", b)
	}
	if err := n.journal.PutStage(StageRecord{VolumeID: "vol-new", StagingPath: t.TempDir(), FsType: DefaultFsType, Epoch: epoch,
		Size: testSize, DiskDir: diskDir(state, "vol-new"), Phase: PhaseStaged}); err != nil {
		t.Fatal(err)
	}
	n.Close()

	// Second start in boot-2, the blocker gone: still a reboot for vol-old,
	// which is cleaned up and not served; a restart for vol-new, served again.
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	n = newTestServerIn(t, dp, "node-a", state, "boot-2")
	if rec, ok, _ := n.journal.Stage("vol-old"); ok || n.live("vol-old") != nil || exists(old.DiskDir) {
		t.Fatalf("vol-old of boot-1 was served or kept after the second start: %+v (live %t)", rec, n.live("vol-old") != nil)
	}
	if rec, _, _ := n.journal.Stage("vol-new"); rec.Phase != PhaseStaged || n.live("vol-new") == nil {
		t.Fatalf("vol-new of boot-2 not served again after the restart: %+v", rec)
	}
	if b, _ := n.journal.RecordedBoot(); b != "boot-2" {
		t.Fatalf("journal records boot %q after the cleanup succeeded; want boot-2", b)
	}
}
