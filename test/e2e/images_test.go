package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/internal/testenv"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/images"
	"github.com/vigil-storage/vigil/sandbox/ledger"
)

// TestImages_RunInContainerd builds the images with `vigil-sandbox images
// build` from the binaries of make build, imports them into a private
// containerd and runs the tools, vigil, writer and pause images under runc:
// the writer as a pod would, on a mounted volume, with every acknowledged
// record checked.
func TestImages_RunInContainerd(t *testing.T) {
	for tool, pkg := range map[string]string{"containerd": "containerd", "ctr": "containerd", "runc": "runc",
		"busybox": "busybox-static", "mke2fs": "e2fsprogs", "blkid": "util-linux"} {
		testenv.RequireTool(t, tool, pkg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin"))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, sandbox.BinVigilSandbox), "images", "build", "--out", out,
		"--bin-dir", bin, "--source", filepath.Join("..", ".."),
		"--only", strings.Join([]string{images.Vigil, images.Pause, images.Writer, images.Tools}, ","))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("vigil-sandbox images build: %v\n%s", err, b)
	}
	t.Logf("images built in %.1fs", time.Since(t0).Seconds())
	t0 = time.Now()
	// A short directory: containerd's socket path must fit in 107 bytes.
	dir, err := os.MkdirTemp("", "vigil-ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	d, err := sandbox.StartContainerd(ctx, sandbox.ContainerdConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Containers a failed check left running: their shims outlive containerd.
		if ids, err := d.Ctr(context.Background(), "tasks", "ls", "-q"); err == nil {
			for _, id := range strings.Fields(string(ids)) {
				_, _ = d.Ctr(context.Background(), "tasks", "kill", "--signal", "SIGKILL", id)
				_, _ = d.Ctr(context.Background(), "tasks", "rm", "-f", id)
			}
		}
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	refs := map[string]string{}
	for _, name := range []string{images.Vigil, images.Pause, images.Writer, images.Tools} {
		if err := d.Import(ctx, filepath.Join(out, name+".tar")); err != nil {
			t.Fatal(err)
		}
		refs[name], _ = images.Ref(name, "dev", nil)
	}
	t.Logf("containerd started, %d images imported in %.1fs", len(refs), time.Since(t0).Seconds())
	listed, err := d.Ctr(ctx, "images", "ls", "-q")
	if err != nil {
		t.Fatal(err)
	}
	for name, ref := range refs {
		if !strings.Contains("\n"+string(listed), "\n"+ref+"\n") {
			t.Errorf("image %s: %s not in containerd after import:\n%s", name, ref, listed)
		}
	}
	run := func(id, ref string, want string, args ...string) {
		t.Helper()
		out, err := d.Ctr(ctx, append([]string{"run", "--rm", ref, id}, args...)...)
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("ctr run %s %q = %v:\n%s\nwant output holding %q (containerd log: %s)", ref, args, err, out, want, d.Config.LogFile())
		}
	}
	run("tools", images.ToolsRef, "hello from busybox", "/bin/sh", "-c", "echo hello from busybox")
	run("vigil-manager", refs[images.Vigil], "vigil-manager", "/usr/local/bin/vigil-manager", "--help")
	run("vigil-engine", refs[images.Vigil], "vigil-engine-node", "/usr/local/bin/vigil-engine-node", "--help")
	run("mkfs", refs[images.Vigil], "mke2fs", "mkfs.ext4", "-V")
	run("blkid", refs[images.Vigil], "blkid from util-linux", "blkid", "-V")
	run("writer", refs[images.Writer], "--ledger", "/usr/local/bin/vigil-writer", "writer", "--help")
	checkPause(ctx, t, d, refs[images.Pause])
	checkWriter(ctx, t, d, refs[images.Writer])
}

// startTask runs ref detached as container id, with extra `ctr run` flags
// before it (mounts), and checks that it runs.
func startTask(ctx context.Context, t *testing.T, d *sandbox.Containerd, id, ref string, flags []string, args ...string) {
	t.Helper()
	if _, err := d.Ctr(ctx, append(append(append([]string{"run", "-d"}, flags...), ref, id), args...)...); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if out, err := d.Ctr(ctx, "tasks", "ls"); err != nil || !strings.Contains(string(out), id+" ") || !strings.Contains(string(out), "RUNNING") {
		t.Fatalf("container %s does not run: %v\n%s", id, err, out)
	}
}

// stopTask sends SIGTERM to container id, as a kubelet stops a pod, waits up
// to 10 s for it to stop and removes it.
func stopTask(ctx context.Context, t *testing.T, d *sandbox.Containerd, id string) {
	t.Helper()
	if _, err := d.Ctr(ctx, "tasks", "kill", "--signal", "SIGTERM", id); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, err := d.Ctr(ctx, "tasks", "ls")
		if err == nil && !strings.Contains(string(out), "RUNNING") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s still runs 10s after SIGTERM:\n%s", id, out)
		}
	}
	if _, err := d.Ctr(ctx, "tasks", "rm", id); err != nil {
		t.Error(err)
	}
	if _, err := d.Ctr(ctx, "containers", "rm", id); err != nil {
		t.Error(err)
	}
}

// checkWriter runs the writer image as its own user (65532) on a bind-mounted
// volume directory, as a pod would, and checks that every record it
// acknowledged in its ledger is on the volume.
func checkWriter(ctx context.Context, t *testing.T, d *sandbox.Containerd, ref string) {
	t.Helper()
	data, ledgerDir := t.TempDir(), t.TempDir()
	for _, dir := range []string{data, ledgerDir} {
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	startTask(ctx, t, d, "writer", ref, []string{
		"--mount", "type=bind,src=" + data + ",dst=/data,options=rbind:rw",
		"--mount", "type=bind,src=" + ledgerDir + ",dst=/ledger,options=rbind:rw"},
		"/usr/local/bin/vigil-writer", "writer", "--dir", "/data", "--pod-uid", "pod-1", "--node", "node-1",
		"--ledger", "/ledger/ledger.log")
	time.Sleep(time.Second)
	stopTask(ctx, t, d, "writer")
	acks, err := ledger.ReadLedger(filepath.Join(ledgerDir, "ledger.log"))
	if err != nil {
		t.Fatal(err)
	}
	found, err := ledger.ReadRecords(filepath.Join(data, ledger.RecordsFile("pod-1")))
	if err != nil {
		t.Fatal(err)
	}
	res := ledger.Verify(ledger.Pod{UID: "pod-1", Node: "node-1", Acks: acks, Found: found})
	if !res.OK() || res.Acked < 3 {
		t.Errorf("the writer container: %s; want at least 3 records acknowledged, all on the volume", res)
	}
}

// checkPause starts the pause image by its entrypoint and stops it with
// SIGTERM, as containerd stops a pod sandbox.
func checkPause(ctx context.Context, t *testing.T, d *sandbox.Containerd, ref string) {
	t.Helper()
	startTask(ctx, t, d, "pause", ref, nil)
	stopTask(ctx, t, d, "pause")
}
