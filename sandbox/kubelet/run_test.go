package kubelet

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
)

// waitFor polls cond until it holds or the bound passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRun_MountsThenTearsDown runs the whole loop (informers on a fake
// clientset, the CSI test double) and waits, bounded, for observed state.
func TestRun_MountsThenTearsDown(t *testing.T) {
	root := t.TempDir()
	fn, _ := startFakeNode(t, root)
	pod := newPod("web", claimVolume("data", "claim-1"))
	other := newPod("elsewhere", claimVolume("data", "claim-1"))
	other.Spec.NodeName = "node-b"
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}},
		newPVC("claim-1", "pv-1"), newPV("pv-1", "vol-1"), newVA("pv-1", "vol-1", true, "3"), pod, other)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{NodeName: testNode, Client: client, CSIEndpoint: fn.endpoint, RootDir: root,
			PollInterval: 50 * time.Millisecond, Recorder: record.NewFakeRecorder(100),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	inUse := func() []string {
		n, err := client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range n.Status.VolumesInUse {
			out = append(out, string(v))
		}
		return out
	}
	var calls []string
	seen := func(c string) func() bool {
		return func() bool { calls = append(calls, fn.takeCalls()...); return slices.Contains(calls, c) }
	}
	waitFor(t, "publish", seen(publish("vol-1", "web", "pv-1")))
	if !slices.Equal(calls, []string{stage1, publish("vol-1", "web", "pv-1")}) {
		t.Errorf("calls = %q", calls)
	}
	if got := inUse(); !slices.Equal(got, []string{inUse1}) {
		t.Errorf("volumesInUse = %v", got)
	}
	if err := client.CoreV1().Pods(testNS).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	calls = nil
	waitFor(t, "unstage", seen(unstage1))
	waitFor(t, "volumesInUse cleared", func() bool { return len(inUse()) == 0 })
	if !slices.Equal(calls, []string{unpublish("vol-1", "web", "pv-1"), unstage1}) {
		t.Errorf("calls = %q", calls)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil after cancel", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestRun_BadConfig(t *testing.T) {
	client := fake.NewClientset()
	ok := Config{NodeName: "n", Client: client, CSIEndpoint: "unix:///run/csi.sock", RootDir: "/var/lib/kubelet"}
	for name, tc := range map[string]struct {
		mutate func(*Config)
		want   string
	}{
		"missing":             {func(c *Config) { *c = Config{} }, "NodeName, Client, CSIEndpoint, RootDir required"},
		"tcp endpoint":        {func(c *Config) { c.CSIEndpoint = "tcp://127.0.0.1:1" }, `CSIEndpoint "tcp://127.0.0.1:1" is not a unix socket`},
		"relative socket":     {func(c *Config) { c.CSIEndpoint = "unix:csi.sock" }, "no absolute socket path"},
		"relative root":       {func(c *Config) { c.RootDir = "kubelet" }, `RootDir "kubelet" is not an absolute path`},
		"negative poll":       {func(c *Config) { c.PollInterval = -time.Second }, "PollInterval = -1s is negative"},
		"backoff max < start": {func(c *Config) { c.BackoffInitial, c.BackoffMax = time.Minute, time.Second }, "BackoffMax 1s is below BackoffInitial 1m0s"},
	} {
		t.Run(name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := Run(context.Background(), c)
			if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want ErrBadConfig naming %q", err, tc.want)
			}
		})
	}
	c, err := ok.withDefaults()
	if err != nil || c.Driver != "driver.vigil.io" || c.PollInterval != DefaultPollInterval || c.BackoffMax != DefaultBackoffMax {
		t.Errorf("defaults = %+v, %v", c, err)
	}
}
