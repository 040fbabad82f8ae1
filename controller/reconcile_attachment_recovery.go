package controller

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// attachmentRecovery is the attachment recovery reconciler: it owns the
// attachment keys of down nodes and applies volume-attachment-recovery-policy
// (decideAttachment) to every protected volume such a node still holds.
type attachmentRecovery struct{ *Controller }

// reconcile applies volume-attachment-recovery-policy to every protected
// volume a down node still holds (a VolumeAttachment on it, an entry of its
// status.volumesInUse, or both): an error requeues the node; a decision that
// only a change can alter is an Event.
func (r *attachmentRecovery) reconcile(ctx context.Context, req *request) error {
	name, set, v := req.nodeName, req.set, req.verdict
	if !v.State.Down() {
		return nil
	}
	vols := r.volumesOnNode(name, req.node)
	if len(vols) == 0 {
		return nil
	}
	var view grantsView
	if set.BackendDriver != "" {
		var err error
		if view, err = r.proofs.grants(ctx, name); err != nil {
			ref := nodeRef(name)
			r.events.emit(ref, ref.UID, corev1.EventTypeWarning, EventAttachmentNotFreed,
				fmt.Sprintf("cannot prove node %s fenced: %v; volumesInUse left as it is, retrying", name, err))
		}
	}
	blocked := r.blocked()
	var recheck bool
	for _, vol := range vols {
		vol.Proven = vol.Driver == set.BackendDriver && view.proven(vol.Handle)
		d := decideAttachment(vol, v, set)
		recheck = recheck || d.RecheckAfter > 0
		if len(d.Actions) == 0 {
			r.reportAttachmentWait(name, vol, v, d, set)
			continue
		}
		if blocked != "" || set.DryRun {
			r.reportAttachmentDryRun(name, vol, d, blocked)
			continue
		}
		if err := r.freeAttachment(ctx, name, vol, d, v); err != nil {
			return err
		}
	}
	if recheck {
		r.queue.AddAfter(queueKey{kind: keyAttachments, name: name}, attachmentProofRecheck)
	}
	return nil
}

// volumesOnNode gathers the protected volumes the node holds, from the
// VolumeAttachments on it and its status.volumesInUse, with the pods that use
// each volume's claim on the node and elsewhere.
func (r *attachmentRecovery) volumesOnNode(name string, node *corev1.Node) []*volumeOnNode {
	byPV := map[string]*volumeOnNode{}
	objs, _ := r.vaIndex.ByIndex(attachmentByNodeIndex, name)
	for _, o := range objs {
		va, ok := o.(*storagev1.VolumeAttachment)
		if !ok || va.Spec.Source.PersistentVolumeName == nil {
			continue
		}
		pv := *va.Spec.Source.PersistentVolumeName
		byPV[pv] = &volumeOnNode{PVName: pv, Driver: va.Spec.Attacher, Attachment: &Attachment{
			Name: va.Name, UID: va.UID, NodeName: name, PVName: pv, Deleting: va.DeletionTimestamp != nil, Attached: va.Status.Attached}}
	}
	if node != nil {
		for _, u := range node.Status.VolumesInUse {
			driver, handle, ok := parseUniqueVolumeName(string(u))
			if !ok {
				continue
			}
			pvs, _ := r.pvIndex.ByIndex(pvByHandleIndex, driver+"^"+handle)
			if len(pvs) == 0 {
				continue
			}
			pv := pvs[0].(*corev1.PersistentVolume)
			vol := byPV[pv.Name]
			if vol == nil {
				vol = &volumeOnNode{PVName: pv.Name, Driver: driver}
				byPV[pv.Name] = vol
			}
			vol.InUse, vol.UniqueName = true, string(u)
		}
	}
	out := make([]*volumeOnNode, 0, len(byPV))
	for _, vol := range byPV {
		r.fillVolume(name, vol)
		out = append(out, vol)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PVName < out[j].PVName })
	return out
}

// fillVolume resolves the PV's driver, handle and claim, and the claim's pods.
func (r *attachmentRecovery) fillVolume(node string, vol *volumeOnNode) {
	pv, err := r.pvs.Get(vol.PVName)
	if err != nil {
		return
	}
	if pv.Spec.CSI != nil {
		vol.Driver, vol.Handle = pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle
		if vol.UniqueName == "" {
			vol.UniqueName = uniqueVolumeName(vol.Driver, vol.Handle)
		}
	}
	if ref := pv.Spec.ClaimRef; ref != nil {
		vol.ClaimNamespace, vol.Claim = ref.Namespace, ref.Name
	}
	if vol.Claim == "" {
		return
	}
	pods, _ := r.podsByNode.ByIndex(claimIndex, vol.ClaimNamespace+"/"+vol.Claim)
	for _, o := range pods {
		p, ok := o.(*cachedPod)
		if !ok || p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed {
			continue
		}
		switch {
		case p.NodeName == node:
			vol.PodsOnNode = append(vol.PodsOnNode, p.Namespace+"/"+p.Name)
		case p.DeletionTimestamp == nil && vol.Replacement == "":
			vol.Replacement = p.Namespace + "/" + p.Name
		}
	}
}

// freeAttachment executes the actions: the VolumeAttachment deleted
// (deleteAttachment), the volume taken out of volumesInUse (clearVolumeInUse).
func (r *attachmentRecovery) freeAttachment(ctx context.Context, node string, vol *volumeOnNode, d attachmentDecision, v NodeVerdict) error {
	ref := nodeRef(node)
	for _, a := range d.Actions {
		switch a.Kind {
		case ActionDeleteVolumeAttachment:
			deleted, err := r.deleteAttachment(ctx, node, a)
			if err != nil {
				r.events.emit(ref, ref.UID, corev1.EventTypeWarning, EventReapFailed,
					fmt.Sprintf("deleting VolumeAttachment %s (PV %s) on down node %s: %v; will retry", a.Name, vol.PVName, node, err))
				return err
			}
			if deleted {
				r.events.emit(ref, ref.UID, corev1.EventTypeNormal, EventVolumeAttachmentDeleted,
					fmt.Sprintf("deleted VolumeAttachment %s (PV %s, claim %s/%s) on down node %s (%s): %s",
						a.Name, vol.PVName, vol.ClaimNamespace, vol.Claim, node, v.State, attachmentWhy(vol)))
			}
		case ActionClearVolumeInUse:
			if err := r.clearVolumeInUse(ctx, node, a.Name); err != nil {
				r.events.emit(ref, ref.UID, corev1.EventTypeWarning, EventReapFailed,
					fmt.Sprintf("taking %s out of node %s's volumesInUse: %v; will retry", a.Name, node, err))
				return fmt.Errorf("clear %s from node %s volumesInUse: %w", a.Name, node, err)
			}
			r.metrics.AttachmentActions.WithLabelValues(actionLabelClearVolumeInUse).Inc()
			r.recoveries.attachmentFreed(node, a.Name, vol.PVName, actionLabelClearVolumeInUse, r.now())
			r.events.emit(ref, ref.UID, corev1.EventTypeNormal, EventVolumeInUseCleared,
				fmt.Sprintf("took %s (PV %s) out of down node %s's volumesInUse: the datapath proves the node fenced on it, so the attach-detach controller may detach it now",
					a.Name, vol.PVName, node))
		}
	}
	return nil
}

func attachmentWhy(vol *volumeOnNode) string {
	if vol.Replacement != "" {
		return "replacement " + vol.Replacement + " waits for it"
	}
	return "no pod on the node uses it"
}

// clearVolumeInUse removes one entry from the node's status.volumesInUse. The
// list is read live and written back whole under modifyNode's resourceVersion
// precondition, so an entry the kubelet adds meanwhile (the node came back) is
// never lost: the patch gets a conflict and the next attempt reads the new list.
func (r *attachmentRecovery) clearVolumeInUse(ctx context.Context, node, unique string) error {
	return r.modifyNode(ctx, node, "status", func(n *corev1.Node) bool {
		keep := make([]corev1.UniqueVolumeName, 0, len(n.Status.VolumesInUse))
		for _, u := range n.Status.VolumesInUse {
			if string(u) != unique {
				keep = append(keep, u)
			}
		}
		if len(keep) == len(n.Status.VolumesInUse) {
			return false
		}
		n.Status.VolumesInUse = keep
		return true
	})
}

// reportAttachmentWait explains a deliberate non-action on a down node's volume
// (deduplicated: the same explanation appears once).
func (r *attachmentRecovery) reportAttachmentWait(node string, vol *volumeOnNode, v NodeVerdict, d attachmentDecision, set *Settings) {
	var msg string
	switch d.Reason {
	case ReasonAttachPolicyNever:
		msg = "volume-attachment-recovery-policy is never: Kubernetes' own 6-minute timeout applies"
	case ReasonAttachNoReplacement:
		msg = "policy wait: no replacement pod waits for it yet"
	case ReasonAttachNotProvenFenced:
		msg = fmt.Sprintf("driver %s is not fenced by Vigil (fencing back end: %q), so the node is not proven fenced on it: Kubernetes' own timeout stands",
			vol.Driver, set.BackendDriver)
	case ReasonAttachPodsOnNode:
		msg = fmt.Sprintf("pods on the node still use it: %v", vol.PodsOnNode)
	case ReasonAttachAttaching:
		msg = fmt.Sprintf("VolumeAttachment %s is not attached: the attach-detach controller still attaches it there (it has not yet seen the pod go) and would wait 2 minutes for it if it were deleted; it detaches it by itself, and the fence keeps the node out of the volume",
			vol.Attachment.Name)
	default:
		return
	}
	ref := nodeRef(node)
	r.events.emit(ref, ref.UID, corev1.EventTypeNormal, EventAttachmentNotFreed,
		fmt.Sprintf("not freeing PV %s (claim %s/%s) on down node %s (%s): %s", vol.PVName, vol.ClaimNamespace, vol.Claim, node, v.State, msg))
}

func (r *attachmentRecovery) reportAttachmentDryRun(node string, vol *volumeOnNode, d attachmentDecision, blocked string) {
	ref := nodeRef(node)
	why := "dry run"
	if blocked != "" {
		why = "not acting: " + blocked
	}
	for _, a := range d.Actions {
		switch a.Kind {
		case ActionDeleteVolumeAttachment:
			r.events.emit(ref, ref.UID, corev1.EventTypeNormal, EventWouldDeleteVolumeAttachment,
				fmt.Sprintf("%s: would delete VolumeAttachment %s (PV %s) on down node %s", why, a.Name, vol.PVName, node))
		case ActionClearVolumeInUse:
			r.events.emit(ref, ref.UID, corev1.EventTypeNormal, EventWouldClearVolumeInUse,
				fmt.Sprintf("%s: would take %s out of down node %s's volumesInUse", why, a.Name, node))
		}
	}
}
