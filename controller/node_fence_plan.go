package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A fence never strands a pod: after it, every pod of the node that uses a
// fenced volume is reaped and replaced. So the node fence fences only what the
// reaper will finish: the node's live grants minus every volume a pod that will
// not be reaped uses (an opted-out pod, a Deployment pod under
// delete-statefulset-pod, a DaemonSet, Job or bare pod, a pod with a volume the
// back end cannot prove). Such a pod keeps its grant and, once its node is back,
// works as if nothing had happened. A pod that would be reaped but shares a
// volume with one that will not is not reaped either (its volume is not fenced,
// so it is never proven), and its other volumes are not fenced: the rule closes
// over shared volumes. A volume whose datapath server does not answer (the
// back end's state unknown) cannot be fenced now: it is held like a volume of
// a pod that will not be reaped, so the pods that use it are not reaped (their
// volume is never proven) and the rest of the node's fence goes ahead: one dead
// datapath server does not stop the recovery of the pods whose data is on
// the others.

// fencePod is what decideFenceVolumes knows of one pod on the node.
type fencePod struct {
	Key string // namespace/name
	UID types.UID
	// Reaped: the policy reaps the pod once every one of its volumes is proven
	// fenced (coverage holds and the back end can prove each volume).
	Reaped bool
	// Why the pod will not be reaped, when not Reaped.
	Why Reason
	// Handles are the pod's volumes of the back end's driver.
	Handles []string
}

// heldVolume says why a volume the node holds keeps its grant: the pod that uses
// it will not be reaped, and why.
type heldVolume struct {
	Pod string
	Why Reason
	// Via, for a pod that would have been reaped, is the volume it shares with
	// a pod that will not be (held for that pod's sake), or its volume whose
	// datapath server does not answer (Why ReasonVolumeServerSilent).
	Via string
}

func (h heldVolume) String() string {
	switch {
	case h.Why == ReasonVolumeServerSilent && h.Pod == "":
		return "its datapath server does not answer, so it cannot be fenced now"
	case h.Why == ReasonVolumeServerSilent:
		return fmt.Sprintf("used by pod %s, whose volume %s is on a datapath server that does not answer", h.Pod, h.Via)
	case h.Via != "":
		return fmt.Sprintf("used by pod %s, which shares volume %s with a pod that will not be reaped", h.Pod, h.Via)
	}
	return fmt.Sprintf("used by pod %s, which will not be reaped (%s)", h.Pod, h.Why)
}

// fencePlan is decideFenceVolumes' answer.
type fencePlan struct {
	// Fence lists the node's live grants to revoke, sorted.
	Fence []string
	// Reaped are the pods the fence commits the reaper to: each is reaped once
	// its volumes are proven fenced, even if its node comes back first.
	Reaped map[types.UID]bool
	// Held are the node's live grants left alone, by handle.
	Held map[string]heldVolume
}

// decideFenceVolumes is the fence's scope. It is pure: live are the volumes on
// which the node holds a live grant or may hold one, silent those of them
// whose datapath server does not answer, pods the node's pods (sorted by Key
// for a stable answer).
func decideFenceVolumes(live, silent []string, pods []fencePod) fencePlan {
	plan := fencePlan{Reaped: map[types.UID]bool{}, Held: map[string]heldVolume{}}
	hold := func(handles []string, h heldVolume) {
		for _, v := range handles {
			if _, ok := plan.Held[v]; !ok {
				plan.Held[v] = h
			}
		}
	}
	for _, p := range pods {
		if p.Reaped {
			plan.Reaped[p.UID] = true
		} else {
			hold(p.Handles, heldVolume{Pod: p.Key, Why: p.Why})
		}
	}
	hold(silent, heldVolume{Why: ReasonVolumeServerSilent})
	for changed := true; changed; {
		changed = false
		for _, p := range pods {
			if !plan.Reaped[p.UID] {
				continue
			}
			for _, v := range p.Handles {
				if h, held := plan.Held[v]; held {
					why := ReasonSharesUnfencedVolume
					if h.Why == ReasonVolumeServerSilent && h.Pod == "" {
						why = ReasonVolumeServerSilent
						delete(plan.Held, v) // held for this pod now, which names it
					}
					delete(plan.Reaped, p.UID)
					hold(p.Handles, heldVolume{Pod: p.Key, Why: why, Via: v})
					changed = true
					break
				}
			}
		}
	}
	for _, v := range live {
		if _, held := plan.Held[v]; !held && !slices.Contains(plan.Fence, v) {
			plan.Fence = append(plan.Fence, v)
		}
	}
	sort.Strings(plan.Fence)
	liveSet := map[string]bool{}
	for _, v := range live {
		liveSet[v] = true
	}
	for v := range plan.Held {
		if !liveSet[v] {
			delete(plan.Held, v) // nothing to hold: the node cannot write it anyway
		}
	}
	return plan
}

// fencePods reads the node's pods as decideFenceVolumes sees them. A finished
// pod does no I/O and holds nothing.
func (r *nodeFence) fencePods(node string, set *Settings) []fencePod {
	objs, _ := r.podsByNode.ByIndex(nodeIndex, node)
	out := make([]fencePod, 0, len(objs))
	for _, o := range objs {
		c, ok := o.(*cachedPod)
		if !ok || c.Phase == corev1.PodSucceeded || c.Phase == corev1.PodFailed {
			continue
		}
		pod := c.pod()
		vols := r.listers.volumes(pod)
		p := fencePod{Key: pod.Namespace + "/" + pod.Name, UID: pod.UID}
		for i := range vols {
			if vols[i].Inline == "" && vols[i].Driver == set.BackendDriver && vols[i].Handle != "" {
				p.Handles = append(p.Handles, vols[i].Handle)
			}
		}
		if len(p.Handles) == 0 {
			continue // nothing of it can be fenced
		}
		p.Why, p.Reaped = reapable(pod, r.listers.ownerKind(pod), vols, set)
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// reapable reports whether the fast trigger will reap the pod once its volumes
// are proven fenced: decision table rows 1 and 2, and every volume one the back
// end can prove.
func reapable(pod *corev1.Pod, owner OwnerKind, vols []VolumeInfo, set *Settings) (Reason, bool) {
	if why, ok := coverage(pod, owner, vols, set); !ok {
		return why, false
	}
	for i := range vols {
		if vols[i].Inline != "" || vols[i].Driver != set.BackendDriver || vols[i].Handle == "" {
			return ReasonVolumeNotProvable, false
		}
	}
	return "", true
}

// planFence reads the node's live grants and pods and decides the fence's scope.
func (r *nodeFence) planFence(ctx context.Context, node string, set *Settings) (fencePlan, error) {
	view, err := r.proofs.refresh(ctx, node)
	if err != nil {
		return fencePlan{}, err
	}
	live, silent := view.liveHandles()
	return decideFenceVolumes(live, silent, r.fencePods(node, set)), nil
}

// describeHeld lists the volumes a fence left alone and why, for Events.
func describeHeld(held map[string]heldVolume) string {
	if len(held) == 0 {
		return ""
	}
	parts := make([]string, 0, len(held))
	for v, h := range held {
		parts = append(parts, v+" ("+h.String()+")")
	}
	sort.Strings(parts)
	const show = 10
	more := ""
	if len(parts) > show {
		parts, more = parts[:show], ", …"
	}
	return fmt.Sprintf("; left %d volume(s) of pods that will not be reaped unfenced, so they are not stranded: %s%s",
		len(held), strings.Join(parts, ", "), more)
}
