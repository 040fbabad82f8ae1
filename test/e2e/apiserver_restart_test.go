package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil/sandbox"
)

// TestAPIServer_Restart restarts the shared sandbox's kube-apiserver: a new
// process answers with the same data (etcd keeps running), its PID is where
// kwokctl keeps it (so the suite's Down still stops it), and the nodes are
// Ready again.
func TestAPIServer_Restart(t *testing.T) {
	ctx := context.Background()
	pidFile := filepath.Join(sb.WorkDir(), "kwok", "clusters", "e2e", "pids", "kube-apiserver.pid")
	before, err := os.ReadFile(pidFile)
	must(t, err)
	nodes, err := sb.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	must(t, err)
	t0 := time.Now()
	must(t, sb.RestartAPIServer(ctx, time.Minute))
	t.Logf("API server restarted and ready in %.1fs", time.Since(t0).Seconds())
	after, err := os.ReadFile(pidFile)
	must(t, err)
	if strings.TrimSpace(string(after)) == strings.TrimSpace(string(before)) {
		t.Errorf("kube-apiserver pid file still names %s after the restart", before)
	}
	if _, err := os.Stat("/proc/" + strings.TrimSpace(string(before))); err == nil {
		exe, _ := os.Readlink("/proc/" + strings.TrimSpace(string(before)) + "/exe")
		if strings.HasSuffix(exe, "kube-apiserver") {
			t.Errorf("the old kube-apiserver (pid %s) still runs", before)
		}
	}
	again, err := sb.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	must(t, err)
	if len(again.Items) != len(nodes.Items) {
		t.Errorf("after the restart %d nodes, before %d", len(again.Items), len(nodes.Items))
	}
	must(t, sb.WaitNodeReady(ctx, time.Minute, corev1.ConditionTrue, "node-1", "node-2", "node-3"))
}

// TestAPIServer_StopStart stops the shared sandbox's kube-apiserver and starts
// it again: while stopped nothing answers, a second stop and a start without a
// stop are refused with their own errors, and after the start the same data is
// served and the nodes are Ready again.
func TestAPIServer_StopStart(t *testing.T) {
	ctx := context.Background()
	if err := sb.StartAPIServer(ctx, time.Second); !errors.Is(err, sandbox.ErrAPIServerRunning) {
		t.Fatalf("StartAPIServer of a running API server: %v, want ErrAPIServerRunning", err)
	}
	nodes, err := sb.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	must(t, err)
	must(t, sb.StopAPIServer())
	stopped := true
	defer func() {
		if stopped {
			_ = sb.StartAPIServer(ctx, time.Minute)
		}
	}()
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := sb.Client().CoreV1().Nodes().List(short, metav1.ListOptions{}); err == nil {
		t.Error("the API server answers after StopAPIServer")
	}
	if err := sb.StopAPIServer(); !errors.Is(err, sandbox.ErrAPIServerStopped) {
		t.Errorf("StopAPIServer of a stopped API server: %v, want ErrAPIServerStopped", err)
	}
	t0 := time.Now()
	must(t, sb.StartAPIServer(ctx, time.Minute))
	stopped = false
	t.Logf("API server started again and ready in %.1fs", time.Since(t0).Seconds())
	again, err := sb.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	must(t, err)
	if len(again.Items) != len(nodes.Items) {
		t.Errorf("after the start %d nodes, before %d", len(again.Items), len(nodes.Items))
	}
	must(t, sb.WaitNodeReady(ctx, time.Minute, corev1.ConditionTrue, "node-1", "node-2", "node-3"))
}
