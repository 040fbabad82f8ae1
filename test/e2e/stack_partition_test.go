package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/sandbox"
)

// connectivityWindow is how recent a heartbeat must be for the datapath to call
// a node connected, in this test (engines heartbeat every second).
const connectivityWindow = 3 * time.Second

// TestStack_PartitionTargets checks what each partition target means to the
// real stack, as Kubernetes and the datapath see it: cut from the datapath, the
// node's engine stops heartbeating at the datapath while Kubernetes keeps the
// node Ready (storage-isolated); cut from the API server only, the engine
// heartbeats again while the node goes NotReady (a zombie); healed, the node is
// Ready and connected.
func TestStack_PartitionTargets(t *testing.T) {
	ctx := context.Background()
	s, stk := upStack(t)
	tok, err := datapath.ReadTokenFile(stk.TokenFile)
	must(t, err)
	dp, err := dpclient.Dial(ctx, stk.DatapathAddr, tok)
	must(t, err)
	defer dp.Close()
	const node = stackNodeA
	t.Cleanup(func() {
		if err := s.Heal(node); err != nil {
			t.Errorf("heal %s: %v", node, err)
		}
	})
	waitConnected(t, ctx, dp, node, true)

	start := time.Now()
	tl := newTimeline(start)
	must(t, s.Partition(node, sandbox.PartitionDatapath))
	tl.mark("cut from the datapath", time.Now())
	waitConnected(t, ctx, dp, node, false)
	tl.mark(fmt.Sprintf("datapath: no heartbeat from %s within %s", node, connectivityWindow), time.Now())
	// Past the node-monitor grace period since the cut, Kubernetes still calls
	// the node Ready: kwok renews its lease over the API server link.
	for time.Since(start) < nodeMonitorGrace+5*time.Second {
		checkReady(t, ctx, s, node, corev1.ConditionTrue)
		time.Sleep(time.Second)
	}
	tl.mark("node still Ready after the node-monitor grace period", time.Now())

	must(t, s.Partition(node, sandbox.PartitionAPIServer))
	tl.mark("cut from the API server only (replaces the datapath cut)", time.Now())
	waitConnected(t, ctx, dp, node, true)
	tl.mark("datapath: heartbeats again", time.Now())
	must(t, s.WaitNodeReady(ctx, nodeMonitorGrace+20*time.Second, corev1.ConditionUnknown, node))
	tl.mark("node Ready=Unknown (NotReady)", time.Now())
	c, err := dp.Connectivity(ctx, node, "", connectivityWindow)
	must(t, err)
	if !c.Connected {
		t.Errorf("%s NotReady under an API-server-only cut but not connected to the datapath (last heartbeat %s, now %s): want a zombie",
			node, c.LastHeartbeat, c.Now)
	}

	must(t, s.Heal(node))
	tl.mark("healed", time.Now())
	must(t, s.WaitNodeReady(ctx, 60*time.Second, corev1.ConditionTrue, node))
	tl.mark("node Ready=True", time.Now())
	waitConnected(t, ctx, dp, node, true)
	tl.mark("datapath: connected", time.Now())
	t.Log(tl.table(fmt.Sprintf("Partition targets on %s (node-monitor-grace-period %s)", node, nodeMonitorGrace)))
}

// waitConnected waits until the datapath calls node connected (or not).
func waitConnected(t *testing.T, ctx context.Context, dp *dpclient.Client, node string, want bool) {
	t.Helper()
	must(t, sandbox.Poll(ctx, 60*time.Second, fmt.Sprintf("datapath connectivity of %s = %v", node, want),
		func(ctx context.Context) (bool, string, error) {
			c, err := dp.Connectivity(ctx, node, "", connectivityWindow)
			if err != nil {
				return false, err.Error(), nil
			}
			return c.Connected == want, fmt.Sprintf("connected %v, last heartbeat %s, now %s", c.Connected, c.LastHeartbeat, c.Now), nil
		}, nil))
}

// checkReady fails the test unless node's Ready condition is want now.
func checkReady(t *testing.T, ctx context.Context, s *sandbox.Sandbox, node string, want corev1.ConditionStatus) {
	t.Helper()
	n, err := s.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	must(t, err)
	if got := sandbox.NodeReadyStatus(n); got != want {
		t.Fatalf("%s Ready=%s, want %s", node, got, want)
	}
}
