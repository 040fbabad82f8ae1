package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/vigil-storage/vigil/fenceapi"
)

// A fence is taken from the node's live grants at one instant. A grant given
// to the node after it - a ControllerPublish, and the stage behind it, that
// raced the fence - is a live grant on a node the manager still considers cut
// off from the datapath: its writes would be accepted, and the reaper, which
// proves volumes from the grants, would then never take the pod. So while a
// storage-isolated node's fence stands, each look at the node (every
// downRecheck) fences again what the fence's own rule (decideFenceVolumes)
// would fence now. Positive evidence wins: a node whose engine heartbeats, in
// the storage watch's marks or in a report fetched just before acting, is not
// isolated, and nothing is fenced again.

// refenceWhy says why decideRefence fences nothing (empty when it fences).
type refenceWhy string

const (
	refenceOff          refenceWhy = "fast trigger off or no fencing back end"
	refenceNotFenced    refenceWhy = "node not fenced in this episode"
	refenceNotIsolated  refenceWhy = "node no longer storage-isolated"
	refenceHeartbeats   refenceWhy = "engine heartbeats again"
	refenceNothingFresh refenceWhy = "no live grant to fence"
)

// refenceInput is what decideRefence knows about one node.
type refenceInput struct {
	// Enabled: the fast trigger is on and a fencing back end is configured.
	Enabled bool
	// Fenced: Vigil fenced the node in this episode and the fence stands.
	Fenced bool
	// Isolated: the storage watch still marks the node storage-isolated.
	Isolated bool
	// Silent: a connectivity report fetched now shows the node's engine
	// silent for at least the threshold (and no graceful stop announced).
	Silent bool
	// Plan is decideFenceVolumes on the node's live grants and pods now.
	Plan fencePlan
}

// decideRefence returns the volumes to fence again on a fenced,
// storage-isolated node, or nil and why not. It is pure.
func decideRefence(in refenceInput) ([]string, refenceWhy) {
	switch {
	case !in.Enabled:
		return nil, refenceOff
	case !in.Fenced:
		return nil, refenceNotFenced
	case !in.Isolated:
		return nil, refenceNotIsolated
	case len(in.Plan.Fence) == 0:
		return nil, refenceNothingFresh
	case !in.Silent:
		return nil, refenceHeartbeats
	}
	return in.Plan.Fence, ""
}

// silentPast reports whether the report shows node silent for at least
// threshold; a node the report does not name, or one that announced a
// graceful stop, is not.
func silentPast(rep fenceapi.Report, node string, threshold time.Duration) bool {
	d, ok := rep.Silence(node)
	return ok && d >= threshold
}

// refence fences again, on a node whose storage-isolation fence stands, the
// live grants the fence's rule would fence now (decideRefence). The grants
// are read through the shared proof fetch; the connectivity report only when
// there is something to fence.
func (r *nodeFence) refence(ctx context.Context, name string, o nodeObservation, set *Settings) error {
	in := refenceInput{Enabled: set.FastFencedTrigger && r.backend != nil, Fenced: o.Fenced, Isolated: o.Isolated}
	if _, why := decideRefence(in); why != refenceNothingFresh {
		return nil // off, not fenced or not isolated: no grant can change that
	}
	view, err := r.proofs.grants(ctx, name)
	if err != nil {
		return fmt.Errorf("grants of fenced node %s: %w", name, err)
	}
	live, silent := view.liveHandles()
	in.Plan = decideFenceVolumes(live, silent, r.fencePods(name, set))
	if len(in.Plan.Fence) > 0 {
		rep, err := r.backend.Connectivity(ctx)
		if err != nil {
			return fmt.Errorf("connectivity before fencing node %s again: %w", name, err)
		}
		in.Silent = silentPast(rep, name, r.settings.DatapathConnectivityLossThreshold())
	}
	handles, why := decideRefence(in)
	if len(handles) == 0 {
		if why == refenceHeartbeats {
			klog.FromContext(ctx).Info("fresh live grants on a fenced node whose engine heartbeats again: not fenced again", "node", name, "grants", in.Plan.Fence)
		}
		return nil
	}
	return r.fenceAgain(ctx, name, handles, in.Plan, set)
}

// fenceAgain carries out decideRefence's answer.
func (r *nodeFence) fenceAgain(ctx context.Context, name string, handles []string, plan fencePlan, set *Settings) error {
	ref := nodeRef(name)
	what := fmt.Sprintf("node %s is still storage-isolated and fenced, but holds live grant(s) given after the fence (%v)", name, handles)
	if blocked := r.blocked(); set.DryRun || blocked != "" {
		why := "dry run"
		if blocked != "" {
			why = "not acting (" + blocked + ")"
		}
		r.events.emit(ref, ref.UID, corev1.EventTypeNormal, EventWouldFence, fmt.Sprintf("%s: %s; would fence them again", why, what))
		return nil
	}
	fenced, err := r.backend.FenceVolumes(ctx, name, handles)
	if err != nil {
		r.metrics.Fences.WithLabelValues(outcomeFailed).Inc()
		r.events.emit(ref, ref.UID, corev1.EventTypeWarning, EventFenceFailed, fmt.Sprintf("%s; cannot fence them again: %v; retrying", what, err))
		return fmt.Errorf("fence node %s again: %w", name, err)
	}
	at := r.now()
	r.metrics.Fences.WithLabelValues(outcomeDone).Inc()
	r.recoveries.fenced(name, fenced, at)
	r.nodes.addFenced(name, plan)
	if _, err := r.proofs.refresh(ctx, name); err != nil {
		return err
	}
	r.events.emit(ref, ref.UID, corev1.EventTypeWarning, EventNodeRefenced,
		fmt.Sprintf("%s: fenced them again: %s%s", what, describeFenced(fenced), describeHeld(plan.Held)))
	return nil
}

// addFenced adds a second fence's pods and held grants to the node's fence
// episode (the maps are replaced, never mutated).
func (t *nodeTracker) addFenced(name string, plan fencePlan) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.nodes[name]
	if r == nil || r.fencedAt.IsZero() {
		return
	}
	pods := make(map[types.UID]bool, len(r.fencedPods)+len(plan.Reaped))
	for uid := range r.fencedPods {
		pods[uid] = true
	}
	for uid := range plan.Reaped {
		pods[uid] = true
	}
	held := make(map[string]heldVolume, len(r.held)+len(plan.Held))
	for h, v := range r.held {
		held[h] = v
	}
	for h, v := range plan.Held {
		held[h] = v
	}
	r.fencedPods, r.held = pods, held
}
