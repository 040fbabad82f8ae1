package demo

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/sandbox"
)

// fakeBins is a directory holding executable files of the names given.
func fakeBins(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRun_BadConfig(t *testing.T) {
	vigilBins := fakeBins(t, sandbox.BinVigilManager, sandbox.BinVigilDatapath, sandbox.BinVigilEngineNode, sandbox.BinVigilSandbox)
	testbin := fakeBins(t, sandbox.BinEtcd, sandbox.BinKubeAPIServer, sandbox.BinKubeControllerManager, sandbox.BinKubeScheduler,
		sandbox.BinKwok, sandbox.BinKwokctl)
	ok := Config{WorkDir: t.TempDir(), VigilBinDir: vigilBins, BinDir: testbin, Out: &bytes.Buffer{}}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   error
		says   string
	}{
		{"listen without a port", func(c *Config) { c.Listen = "127.0.0.1" }, ErrBadConfig, "HOST:PORT"},
		{"listen beyond loopback", func(c *Config) { c.Listen = "0.0.0.0:9500" }, ErrBadConfig, "loopback"},
		{"listen on a name", func(c *Config) { c.Listen = "localhost:9500" }, ErrBadConfig, "loopback"},
		{"negative timeout", func(c *Config) { c.Timeout = -time.Second }, ErrBadConfig, "Timeout"},
		{"no Vigil binaries", func(c *Config) { c.VigilBinDir = "" }, ErrBadConfig, "make build"},
		{"Vigil binaries missing", func(c *Config) { c.VigilBinDir = t.TempDir() }, sandbox.ErrBinariesMissing, "make build"},
		{"control plane missing", func(c *Config) { c.BinDir = t.TempDir() }, sandbox.ErrBinariesMissing, "make testbin"},
		{"unknown kubelet", func(c *Config) { c.Kubelet = "docker" }, ErrBadConfig, `Kubelet "docker": want "real"`},
		{"pod subnet on kwok nodes", func(c *Config) { c.Kubelet, c.PodSubnet = sandbox.KubeletKwok, "10.220.0.0/16" }, ErrBadConfig, "for real nodes"},
		{"source tree on kwok nodes", func(c *Config) { c.Kubelet, c.SourceDir = sandbox.KubeletKwok, "../.." }, ErrBadConfig, "for real nodes"},
		{"no source tree beside the binaries", func(*Config) {}, ErrBadConfig, "is not Vigil's source tree"},
		{"not a source tree", func(c *Config) { c.SourceDir = t.TempDir() }, ErrBadConfig, "give the repository's root"},
		{"no kubelet for real nodes", func(c *Config) { c.SourceDir = "../.." }, sandbox.ErrBinariesMissing, "kubelet not in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.change(&c)
			err := Run(context.Background(), c)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Run = %v, want %v saying %q", err, tc.want, tc.says)
			}
			if _, err := os.Stat(filepath.Join(c.WorkDir, "state.json")); err == nil {
				t.Errorf("a bad config created a sandbox in %s", c.WorkDir)
			}
		})
	}
}

func TestFollower_Recoveries_InTimeOrder(t *testing.T) {
	var out bytes.Buffer
	f := &follower{d: &demo{cfg: Config{Out: &out}}, printed: map[string]bool{}}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) *metav1.MicroTime {
		m := metav1.NewMicroTime(t0.Add(time.Duration(ms) * time.Millisecond))
		return &m
	}
	rec := v1alpha1.NodeRecovery{ObjectMeta: metav1.ObjectMeta{Name: "node-1-x"}, Spec: v1alpha1.NodeRecoverySpec{NodeName: "node-1"},
		Status: v1alpha1.NodeRecoveryStatus{Reason: "storage-isolated", DetectedAt: at(0), FencedAt: at(20), TaintedAt: at(30),
			Attachments: []v1alpha1.FreedAttachment{
				{Name: "csi-0123456789abcdef0123", PVName: "pv-1", Action: "clear-volume-in-use", FreedAt: *at(90)},
				{Name: "csi-0123456789abcdef0123", PVName: "pv-1", Action: "delete-volumeattachment", FreedAt: *at(80)},
			}}}
	f.origin = t0.Add(-3 * time.Second)
	f.recoveries([]v1alpha1.NodeRecovery{rec})
	f.flushAll()
	f.recoveries([]v1alpha1.NodeRecovery{rec}) // nothing new: nothing printed twice
	f.flushAll()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"03:04:05.000   +3.00s  manager: node-1 is down (storage-isolated), NodeRecovery node-1-x",
		"03:04:05.020   +3.02s  manager: fenced node-1 at the datapath",
		"03:04:05.030   +3.03s  manager: tainted node-1 vigil.io/fenced:NoSchedule",
		"03:04:05.080   +3.08s  manager: deleted VolumeAttachment csi-0123456789ab… of pv-1 on node-1",
		"03:04:05.090   +3.09s  manager: removed pv-1 from node-1's status.volumesInUse",
	}
	if len(lines) != len(want) {
		t.Fatalf("printed\n%s\nwant %d lines", out.String(), len(want))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d %q, want it to contain %q", i, lines[i], w)
		}
	}
}

func TestFreedText_UnknownAction(t *testing.T) {
	if got := freedText(v1alpha1.FreedAttachment{Name: "va", Action: "something-new"}, "node-1"); got != "something-new va" {
		t.Errorf("freedText = %q, want the action and the name as they are", got)
	}
}

// A writer's data check counts only the fences of its node since it started:
// a node fenced once, back, and running the pod again must not have the new
// writer's records called written after a fence.
func TestFollower_FencedSpans_SinceWriterStart(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fenced := func(node string, at time.Time) v1alpha1.NodeRecovery {
		m := metav1.NewMicroTime(at)
		return v1alpha1.NodeRecovery{Spec: v1alpha1.NodeRecoverySpec{NodeName: node}, Status: v1alpha1.NodeRecoveryStatus{FencedAt: &m}}
	}
	f := &follower{recs: []v1alpha1.NodeRecovery{
		fenced("node-1", t0),                                  // before the writer started: an earlier life of the node
		fenced("node-2", t0.Add(2*time.Minute)),               // another node
		fenced("node-1", t0.Add(3*time.Minute)),               // this writer's fence
		{Spec: v1alpha1.NodeRecoverySpec{NodeName: "node-1"}}, // detected, not fenced
	}}
	got := f.fencedSpans(&writer{node: "node-1", started: t0.Add(time.Minute)})
	if len(got) != 1 || !got[0].From.Equal(t0.Add(3*time.Minute)) || !got[0].To.IsZero() {
		t.Errorf("fencedSpans = %+v, want one open span from %s", got, t0.Add(3*time.Minute))
	}
}

// A step is held back printDelay, so that one the manager records a moment
// after it happened still comes out before the later steps the demo saw.
func TestFollower_Flush_HoldsBackRecentSteps(t *testing.T) {
	var out bytes.Buffer
	f := &follower{d: &demo{cfg: Config{Out: &out}}, printed: map[string]bool{}}
	now := time.Now()
	f.print("seen", now, "the demo saw this")
	f.flush(now.Add(-printDelay))
	if out.Len() != 0 {
		t.Fatalf("printed %q at once, want it held back %s", out.String(), printDelay)
	}
	f.print("recorded", now.Add(-200*time.Millisecond), "the manager recorded this")
	f.flushAll()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "the manager recorded this") || !strings.Contains(lines[1], "the demo saw this") {
		t.Errorf("printed\n%s\nwant the manager's step first, then the demo's", out.String())
	}
	if len(f.pending) != 0 {
		t.Errorf("pending %v after flushAll, want none", f.pending)
	}
}
