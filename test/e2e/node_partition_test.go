package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil/sandbox"
)

// TestNodePartition_NotReadyThenReady cuts a node's link: the node goes NotReady
// with the unreachable taint while its processes keep running; healed, it is Ready
// again, with the same processes.
func TestNodePartition_NotReadyThenReady(t *testing.T) {
	ctx := context.Background()
	const node = "node-3"
	before := nodeStatus(t, node)
	t.Cleanup(func() {
		if err := sb.Heal(node); err != nil {
			t.Errorf("heal %s: %v", node, err)
		}
	})

	start := time.Now()
	tl := newTimeline(start)
	must(t, sb.Partition(node))
	tl.mark("link cut", time.Now())
	must(t, sb.WaitNodeReady(ctx, nodeMonitorGrace+10*time.Second, corev1.ConditionUnknown, node))
	tl.mark("node Ready=Unknown (NotReady)", time.Now())
	must(t, waitTaint(ctx, node, true))
	tl.mark("taint node.kubernetes.io/unreachable present", time.Now())
	checkSameProcesses(t, before, nodeStatus(t, node))

	must(t, sb.Heal(node))
	tl.mark("link restored", time.Now())
	must(t, sb.WaitNodeReady(ctx, 60*time.Second, corev1.ConditionTrue, node))
	tl.mark("node Ready=True", time.Now())
	must(t, waitTaint(ctx, node, false))
	tl.mark("unreachable taints removed", time.Now())
	checkSameProcesses(t, before, nodeStatus(t, node))
	t.Log(tl.table(fmt.Sprintf("Partition of %s (node-monitor-grace-period %s)", node, nodeMonitorGrace)))
}

// waitTaint waits until node carries an unreachable taint (present) or none.
func waitTaint(ctx context.Context, node string, present bool) error {
	c := sb.Client()
	return sandbox.Poll(ctx, 30*time.Second, fmt.Sprintf("unreachable taint on %s present=%v", node, present),
		func(ctx context.Context) (bool, string, error) {
			n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			has := false
			for _, t := range n.Spec.Taints {
				has = has || t.Key == corev1.TaintNodeUnreachable
			}
			return has == present, fmt.Sprintf("taints %v", n.Spec.Taints), nil
		}, func(ctx context.Context) string { return sandbox.DescribeNodes(ctx, c, node) })
}

// checkSameProcesses fails unless every process of before still runs with its PID.
func checkSameProcesses(t *testing.T, before, now sandbox.NodeStatus) {
	t.Helper()
	if len(before.Processes) == 0 {
		t.Fatalf("node %s has no processes", before.Name)
	}
	for i, p := range before.Processes {
		if i >= len(now.Processes) || now.Processes[i].PID != p.PID || !now.Processes[i].Running || !p.Running {
			t.Errorf("process %s of %s: before pid %d running %v, now %+v", p.Name, before.Name, p.PID, p.Running, now.Processes)
		}
	}
}
