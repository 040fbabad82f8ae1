package sandbox

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// Poll calls cond every interval until it returns true or an error, or timeout
// passes. On timeout the error says what was awaited, cond's last note and the
// diagnostics describe returns (objects and events), so a failed test shows why.
func Poll(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (done bool, note string, err error),
	describe func(ctx context.Context) string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var note string
	for {
		done, n, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		if done {
			return nil
		}
		if n != "" {
			note = n
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("timed out after %s waiting for %s", timeout, what)
			if note != "" {
				msg += "; last seen: " + note
			}
			if describe != nil {
				dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
				msg += "\n" + describe(dctx)
				dcancel()
			}
			return fmt.Errorf("%s", msg)
		case <-tick.C:
		}
	}
}

// WaitNodesReady waits until every sandbox node whose power is on and that is not
// cut off from the API server is Ready.
func (s *Sandbox) WaitNodesReady(ctx context.Context, timeout time.Duration) error {
	st, err := loadState(s.workDir)
	if err != nil {
		return err
	}
	var names []string
	for _, n := range st.Nodes {
		if n.Powered && !n.Partition.cutsAPIServer() {
			names = append(names, n.k8sNodes()...)
		}
	}
	return s.WaitNodeReady(ctx, timeout, corev1.ConditionTrue, names...)
}

// WaitNodeReady waits until each named node's Ready condition has status want;
// for True, also until the node lifecycle controller has removed its not-ready and
// unreachable taints (only then are pods scheduled there).
func (s *Sandbox) WaitNodeReady(ctx context.Context, timeout time.Duration, want corev1.ConditionStatus, names ...string) error {
	what := fmt.Sprintf("nodes %v Ready=%s", names, want)
	return Poll(ctx, timeout, what, func(ctx context.Context) (bool, string, error) {
		var notes []string
		for _, name := range names {
			n, err := s.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				notes = append(notes, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			if got := NodeReadyStatus(n); got != want {
				notes = append(notes, fmt.Sprintf("%s Ready=%s", name, got))
			} else if want == corev1.ConditionTrue && hasHealthTaint(n) {
				notes = append(notes, fmt.Sprintf("%s Ready but still tainted %v", name, n.Spec.Taints))
			}
		}
		return len(notes) == 0, strings.Join(notes, "; "), nil
	}, func(ctx context.Context) string { return DescribeNodes(ctx, s.client, names...) })
}

// DescribeNodes prints the named nodes (all if none) with conditions, taints and
// their events.
func DescribeNodes(ctx context.Context, c kubernetes.Interface, names ...string) string {
	var b strings.Builder
	list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "nodes: " + err.Error()
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for _, n := range list.Items {
		if len(names) > 0 && !want[n.Name] {
			continue
		}
		fmt.Fprintf(&b, "node %s:", n.Name)
		for _, c := range n.Status.Conditions {
			fmt.Fprintf(&b, " %s=%s(%s)", c.Type, c.Status, c.Reason)
		}
		for _, t := range n.Spec.Taints {
			fmt.Fprintf(&b, " taint %s:%s", t.Key, t.Effect)
		}
		b.WriteString("\n")
		b.WriteString(DescribeEvents(ctx, c, "", "Node", n.Name))
	}
	return b.String()
}

// DescribeEvents prints the events of one object (kind/name in namespace ns;
// name "" means all of that kind), oldest first.
func DescribeEvents(ctx context.Context, c kubernetes.Interface, ns, kind, name string) string {
	sel := fields.Set{"involvedObject.kind": kind}
	if name != "" {
		sel["involvedObject.name"] = name
	}
	evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return "  events: " + err.Error() + "\n"
	}
	sort.Slice(evs.Items, func(i, j int) bool { return eventTime(&evs.Items[i]).Before(eventTime(&evs.Items[j])) })
	var b strings.Builder
	for _, e := range evs.Items {
		fmt.Fprintf(&b, "  event %s %s %s/%s %s: %s\n", eventTime(&e).UTC().Format("15:04:05.000"), e.Type,
			e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
	return b.String()
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func hasHealthTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return true
		}
	}
	return false
}
