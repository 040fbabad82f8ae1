package sandbox

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// component is one workload Install waits for.
type component struct {
	kind, namespace, name string
}

func (c component) String() string { return c.kind + " " + c.namespace + "/" + c.name }

// componentState is what one look at a component found: whether it is
// Ready (Complete for a Job), a summary of its counts, the selector of its
// pods, and, for a Job, whether it failed for good.
type componentState struct {
	ready    bool
	failed   bool
	summary  string
	selector *metav1.LabelSelector
}

// deploymentState: every replica of the current generation updated and
// available.
func deploymentState(d *appsv1.Deployment) componentState {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return componentState{
		ready: s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want &&
			s.Replicas == want,
		summary:  fmt.Sprintf("%d/%d available, %d updated", s.AvailableReplicas, want, s.UpdatedReplicas),
		selector: d.Spec.Selector,
	}
}

// statefulSetState: every replica ready, at the current revision.
func statefulSetState(ss *appsv1.StatefulSet) componentState {
	want := int32(1)
	if ss.Spec.Replicas != nil {
		want = *ss.Spec.Replicas
	}
	s := ss.Status
	return componentState{
		ready: s.ObservedGeneration >= ss.Generation && s.ReadyReplicas == want && s.UpdatedReplicas == want &&
			(s.UpdateRevision == "" || s.CurrentRevision == s.UpdateRevision),
		summary:  fmt.Sprintf("%d/%d ready", s.ReadyReplicas, want),
		selector: ss.Spec.Selector,
	}
}

// daemonSetState: a ready pod of the current template on every node that
// should run one, and at least one such node.
func daemonSetState(ds *appsv1.DaemonSet) componentState {
	s := ds.Status
	return componentState{
		ready: s.ObservedGeneration >= ds.Generation && s.DesiredNumberScheduled > 0 &&
			s.NumberReady == s.DesiredNumberScheduled && s.UpdatedNumberScheduled == s.DesiredNumberScheduled,
		summary:  fmt.Sprintf("%d/%d nodes ready", s.NumberReady, s.DesiredNumberScheduled),
		selector: ds.Spec.Selector,
	}
}

// jobState: Complete, or failed for good (its Failed condition).
func jobState(j *batchv1.Job) componentState {
	st := componentState{summary: fmt.Sprintf("%d succeeded, %d failed, %d active", j.Status.Succeeded, j.Status.Failed, j.Status.Active),
		selector: j.Spec.Selector}
	for _, c := range j.Status.Conditions {
		switch {
		case c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue:
			st.ready = true
		case c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue:
			st.failed = true
			st.summary += ": failed: " + c.Reason + " " + c.Message
		}
	}
	return st
}

// lookComponent reads c from the API server.
func lookComponent(ctx context.Context, cl kubernetes.Interface, c component) (componentState, error) {
	switch c.kind {
	case "Deployment":
		d, err := cl.AppsV1().Deployments(c.namespace).Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return componentState{}, err
		}
		return deploymentState(d), nil
	case "StatefulSet":
		ss, err := cl.AppsV1().StatefulSets(c.namespace).Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return componentState{}, err
		}
		return statefulSetState(ss), nil
	case "DaemonSet":
		ds, err := cl.AppsV1().DaemonSets(c.namespace).Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return componentState{}, err
		}
		return daemonSetState(ds), nil
	case "Job":
		j, err := cl.BatchV1().Jobs(c.namespace).Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return componentState{}, err
		}
		return jobState(j), nil
	}
	return componentState{}, fmt.Errorf("%s: not a workload", c)
}

// podWaitingOn says in a few words what keeps a pod from being Ready: not
// scheduled (and why), a container waiting (its reason and message), not
// ready yet, or the last Warning Event about it; "" for a Ready pod.
func podWaitingOn(p *corev1.Pod, lastWarning string) string {
	if p.DeletionTimestamp != nil {
		return "being deleted"
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return "not scheduled: " + oneLine(c.Message)
		}
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return ""
		}
	}
	if p.Status.Phase == corev1.PodSucceeded {
		return ""
	}
	statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" {
			msg := "container " + cs.Name + " " + w.Reason
			if w.Message != "" {
				msg += ": " + oneLine(w.Message)
			}
			return msg
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return fmt.Sprintf("container %s exited %d (%s)", cs.Name, t.ExitCode, t.Reason)
		}
	}
	if lastWarning != "" {
		return lastWarning
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil && !cs.Ready {
			return "container " + cs.Name + " running, not ready yet"
		}
	}
	return "phase " + string(p.Status.Phase)
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// podsWaitingOn lists, for the pods of sel in ns that are not Ready, what
// each waits on ("pod NAME on NODE: ..."), sorted.
func podsWaitingOn(ctx context.Context, cl kubernetes.Interface, ns string, sel *metav1.LabelSelector) []string {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return []string{err.Error()}
	}
	pods, err := cl.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: s.String()})
	if err != nil {
		return []string{err.Error()}
	}
	if len(pods.Items) == 0 {
		return []string{"no pod yet"}
	}
	var out []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if w := podWaitingOn(p, lastWarning(ctx, cl, ns, p.Name)); w != "" {
			node := p.Spec.NodeName
			if node == "" {
				node = "-"
			}
			out = append(out, fmt.Sprintf("pod %s on %s: %s", p.Name, node, w))
		}
	}
	sort.Strings(out)
	return out
}

// lastWarning is the reason and message of the last Warning Event about
// pod name, "" for none. The kubelet's MissingClusterDNS is left out: a
// sandbox has no cluster DNS (deploy/overlays/sandbox resolves the one name
// its pods dial through /etc/hosts), and every pod gets it, ready or not.
func lastWarning(ctx context.Context, cl kubernetes.Interface, ns, name string) string {
	sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": name, "type": corev1.EventTypeWarning}
	evs, err := cl.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return ""
	}
	sort.Slice(evs.Items, func(i, j int) bool { return eventTime(&evs.Items[i]).Before(eventTime(&evs.Items[j])) })
	for i := len(evs.Items) - 1; i >= 0; i-- {
		if e := evs.Items[i]; e.Reason != "MissingClusterDNS" {
			return e.Reason + ": " + oneLine(e.Message)
		}
	}
	return ""
}

// componentsOf lists the workloads of objs.
func componentsOf(objs []*unstructured.Unstructured) []component {
	var out []component
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment", "StatefulSet", "DaemonSet", "Job":
			out = append(out, component{kind: o.GetKind(), namespace: o.GetNamespace(), name: o.GetName()})
		}
	}
	return out
}

// waitInstalled waits until every workload of objs is Ready (a Job
// Complete), logging each change of what a component waits on; on timeout,
// or a Job failed for good, it returns an InstallError.
func (s *Sandbox) waitInstalled(ctx context.Context, objs []*unstructured.Unstructured, timeout time.Duration, t0 time.Time,
	logf func(string, ...any)) ([]ComponentReady, error) {
	pending := componentsOf(objs)
	var ready []ComponentReady
	said := map[component]string{}
	deadline := time.Now().Add(timeout)
	for {
		var still []component
		for _, c := range pending {
			st, err := lookComponent(ctx, s.client, c)
			switch {
			case err != nil:
				st.summary = err.Error()
			case st.ready:
				ready = append(ready, ComponentReady{Component: c.kind + "/" + c.name, After: time.Since(t0)})
				logf("install: %s ready after %.1fs (%s)", c, time.Since(t0).Seconds(), st.summary)
				continue
			case st.failed:
				return ready, s.installError(c, st.summary, fmt.Errorf("%w: %s failed", ErrNotInstalled, c))
			}
			still = append(still, c)
			line := st.summary
			if st.selector != nil {
				if w := podsWaitingOn(ctx, s.client, c.namespace, st.selector); len(w) > 0 {
					line += "; " + strings.Join(w, "; ")
				}
			}
			if said[c] != line {
				said[c] = line
				logf("install: %.0fs %s waits: %s", time.Since(t0).Seconds(), c, line)
			}
		}
		pending = still
		if len(pending) == 0 {
			return ready, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var parts []string
			for _, c := range pending {
				parts = append(parts, c.String()+": "+said[c])
			}
			return ready, s.installError(pending[0], strings.Join(parts, "\n"),
				fmt.Errorf("%w within %s: %d of %d", ErrNotInstalled, timeout, len(pending), len(componentsOf(objs))))
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// InstallError is Install's failure to bring a component up: which one,
// what it waited on, and the diagnostics (its pods' conditions and Events,
// its own Events).
type InstallError struct {
	Component string
	Waiting   string
	Details   string
	Err       error
}

func (e *InstallError) Error() string {
	return fmt.Sprintf("%v; first: %s\nwaiting on:\n%s\n%s", e.Err, e.Component, e.Waiting, e.Details)
}

func (e *InstallError) Unwrap() error { return e.Err }

// installError describes component c: its pods with their conditions and
// events, and its own events.
func (s *Sandbox) installError(c component, waiting string, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	if st, lerr := lookComponent(ctx, s.client, c); lerr == nil && st.selector != nil {
		if sel, serr := metav1.LabelSelectorAsSelector(st.selector); serr == nil {
			b.WriteString(DescribePods(ctx, s.client, c.namespace, sel.String()))
		}
	}
	fmt.Fprintf(&b, "events of %s:\n%s", c, DescribeEvents(ctx, s.client, c.namespace, c.kind, c.name))
	return &InstallError{Component: c.String(), Waiting: waiting, Details: b.String(), Err: err}
}
