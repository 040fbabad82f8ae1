package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vigil-storage/vigil/sandbox"
)

const (
	rackName   = "e2e-rack"
	rackSubnet = "10.213.216.0/24"
)

// TestRack_KubeletTimings: a scale sandbox's rack kwok (here 2 racks of 3
// nodes) runs its nodes the way kubelets with Leases do. Every node is Ready;
// while the Leases are renewed, no node's status is reported again within 35 s
// (a kubelet reports an unchanged status every 5 minutes; kwok's own default
// for Lease-backed nodes was every 20-25 s, the load that kept a 500-node
// bench from finishing its setup); a rack's power cut makes its nodes, and only
// its nodes, Ready=Unknown; power back makes them Ready again.
func TestRack_KubeletTimings(t *testing.T) {
	workDir := filepath.Join(os.TempDir(), "vigil-e2e-rack")
	downAtEnd(t, workDir)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := sandbox.Up(ctx, sandbox.Config{Name: rackName, WorkDir: workDir, Racks: 2, RackSize: 3, Subnet: rackSubnet,
		NodeMonitorGracePeriod: nodeMonitorGrace, Logf: t.Logf})
	if err != nil {
		t.Fatalf("sandbox up: %v", err)
	}
	c := s.Client()
	rack1 := []string{"rack-1-node-1", "rack-1-node-2", "rack-1-node-3"}
	rack2 := []string{"rack-2-node-1", "rack-2-node-2", "rack-2-node-3"}
	all := append(append([]string{}, rack1...), rack2...)

	// Status reports: the Leases move, the status heartbeats do not.
	beats, leases := readyHeartbeats(ctx, t, c, all), leaseRenewals(ctx, t, c, all)
	time.Sleep(35 * time.Second)
	beats2, leases2 := readyHeartbeats(ctx, t, c, all), leaseRenewals(ctx, t, c, all)
	for _, n := range all {
		if !leases2[n].After(leases[n]) {
			t.Errorf("%s: Lease not renewed in 35 s (%v, then %v)", n, leases[n], leases2[n])
		}
		if !beats2[n].Equal(beats[n]) {
			t.Errorf("%s: status reported again within 35 s (heartbeat %v, then %v): want the kubelet's 5 minutes", n, beats[n], beats2[n])
		}
	}

	// A rack's power cut: its nodes Unknown, the other rack's Ready.
	must(t, s.Stop("rack-1"))
	must(t, waitReady(ctx, c, rack1, corev1.ConditionUnknown, nodeMonitorGrace+30*time.Second))
	if got := readyStatuses(ctx, t, c, rack2); got != "True True True" {
		t.Errorf("rack-2 while rack-1 is off: Ready %s, want True for all", got)
	}
	must(t, s.Start("rack-1"))
	must(t, waitReady(ctx, c, rack1, corev1.ConditionTrue, 30*time.Second))
}

func readyHeartbeats(ctx context.Context, t *testing.T, c kubernetes.Interface, nodes []string) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	for _, name := range nodes {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status != corev1.ConditionTrue {
					t.Fatalf("%s: Ready=%s, want True", name, cond.Status)
				}
				out[name] = cond.LastHeartbeatTime.Time
			}
		}
	}
	return out
}

func leaseRenewals(ctx context.Context, t *testing.T, c kubernetes.Interface, nodes []string) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	for _, name := range nodes {
		l, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		if l.Spec.RenewTime != nil {
			out[name] = l.Spec.RenewTime.Time
		}
	}
	return out
}

func readyStatuses(ctx context.Context, t *testing.T, c kubernetes.Interface, nodes []string) string {
	t.Helper()
	var out []string
	for _, name := range nodes {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		out = append(out, string(sandbox.NodeReadyStatus(n)))
	}
	return strings.Join(out, " ")
}

// waitReady waits until every node of nodes has Ready=want.
func waitReady(ctx context.Context, c kubernetes.Interface, nodes []string, want corev1.ConditionStatus, bound time.Duration) error {
	return sandbox.Poll(ctx, bound, fmt.Sprintf("%v Ready=%s", nodes, want), func(ctx context.Context) (bool, string, error) {
		var seen []string
		done := true
		for _, name := range nodes {
			n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			got := sandbox.NodeReadyStatus(n)
			done = done && got == want
			seen = append(seen, name+"="+string(got))
		}
		return done, strings.Join(seen, " "), nil
	}, nil)
}
