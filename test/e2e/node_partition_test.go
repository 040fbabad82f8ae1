package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil/sandbox"
)

// TestNodePartition_NotReadyThenReady cuts a node off, from everything and then
// from the API server only: each time the node goes NotReady with the unreachable
// taint while its processes keep running; healed, it is Ready again, with the same
// processes.
func TestNodePartition_NotReadyThenReady(t *testing.T) {
	for _, target := range []sandbox.PartitionTarget{sandbox.PartitionAll, sandbox.PartitionAPIServer} {
		t.Run(string(target), func(t *testing.T) { partitionNotReadyThenReady(t, target) })
	}
}

func partitionNotReadyThenReady(t *testing.T, target sandbox.PartitionTarget) {
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
	must(t, sb.Partition(node, target))
	tl.mark("cut from "+string(target), time.Now())
	if got := nodeStatus(t, node); got.Partition != target || got.State() != "running,partitioned("+string(target)+")" {
		t.Errorf("status of %s after the cut: partition %q, state %q", node, got.Partition, got.State())
	}
	must(t, sb.WaitNodeReady(ctx, nodeMonitorGrace+10*time.Second, corev1.ConditionUnknown, node))
	tl.mark("node Ready=Unknown (NotReady)", time.Now())
	must(t, waitTaint(ctx, node, true))
	tl.mark("taint node.kubernetes.io/unreachable present", time.Now())
	checkSameProcesses(t, before, nodeStatus(t, node))

	must(t, sb.Heal(node))
	tl.mark("healed", time.Now())
	must(t, sb.WaitNodeReady(ctx, 60*time.Second, corev1.ConditionTrue, node))
	tl.mark("node Ready=True", time.Now())
	must(t, waitTaint(ctx, node, false))
	tl.mark("unreachable taints removed", time.Now())
	checkSameProcesses(t, before, nodeStatus(t, node))
	t.Log(tl.table(fmt.Sprintf("Partition of %s from %s (node-monitor-grace-period %s)", node, target, nodeMonitorGrace)))
}

// TestNodePartition_DatapathWithoutStack: the shared sandbox runs no Vigil
// stack, so a cut from the datapath is refused and changes nothing.
func TestNodePartition_DatapathWithoutStack(t *testing.T) {
	const node = "node-3"
	err := sb.Partition(node, sandbox.PartitionDatapath)
	if !errors.Is(err, sandbox.ErrNotUp) {
		t.Errorf("Partition(%s, datapath) without a stack = %v, want ErrNotUp", node, err)
	}
	if got := nodeStatus(t, node); got.Partitioned {
		t.Errorf("%s is %s after a refused partition, want no cut", node, got.State())
	}
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
