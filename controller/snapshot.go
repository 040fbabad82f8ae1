package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// FenceProver answers, for the fast fenced trigger, whether a volume is proven
// fenced on a node: no I/O from that node can reach it any more. The datapath
// implements it; with none configured the fast trigger fires only on the proofs
// Kubernetes itself gives (a deleted node, the out-of-service taint).
type FenceProver interface {
	ProvenFenced(ctx context.Context, node, driver, volumeHandle string) (bool, error)
}

// listers are the informer caches a snapshot is read from.
type listers struct {
	nodes           corelisters.NodeLister
	pvcs            corelisters.PersistentVolumeClaimLister
	pvs             corelisters.PersistentVolumeLister
	replicaSets     appslisters.ReplicaSetLister
	attachmentsByPV cache.Indexer
}

// snapshot reads what decide needs about pod. It asks prover (when not nil)
// about each volume only when the fast trigger could use the answer.
func (l *listers) snapshot(ctx context.Context, pod *corev1.Pod, nodes *nodeTracker, set *ReaperSettings, prover FenceProver, now time.Time) *Snapshot {
	s := &Snapshot{Pod: pod, Owner: l.ownerKind(pod)}
	if pod.Spec.NodeName == "" {
		return s
	}
	node, err := l.nodes.Get(pod.Spec.NodeName)
	if err == nil {
		s.Node = node
	}
	s.NodeObservedDown = nodes.observedDown(pod.Spec.NodeName, s.Node == nil || !isNodeReady(s.Node), now)
	s.Volumes = l.volumes(pod)
	for i := range s.Volumes {
		s.Attachments = append(s.Attachments, l.attachments(s.Volumes[i].PVName)...)
	}
	if prover != nil && set.FastFencedTrigger && !s.NodeObservedDown.IsZero() {
		for i := range s.Volumes {
			v := &s.Volumes[i]
			if v.Handle == "" {
				continue
			}
			ok, err := prover.ProvenFenced(ctx, pod.Spec.NodeName, v.Driver, v.Handle)
			v.Fenced = ok && err == nil
		}
	}
	return s
}

// ownerKind classifies the pod's controller. A ReplicaSet counts as a Deployment
// only when the cached ReplicaSet (same UID) is itself controlled by a Deployment.
func (l *listers) ownerKind(pod *corev1.Pod) OwnerKind {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil {
		return OwnerNone
	}
	group := groupOf(ref.APIVersion)
	switch {
	case group == "apps" && ref.Kind == "StatefulSet":
		return OwnerStatefulSet
	case group == "apps" && ref.Kind == "DaemonSet":
		return OwnerDaemonSet
	case group == "batch" && ref.Kind == "Job":
		return OwnerJob
	case group == "apps" && ref.Kind == "ReplicaSet":
		rs, err := l.replicaSets.ReplicaSets(pod.Namespace).Get(ref.Name)
		if err != nil || rs.UID != ref.UID {
			return OwnerReplicaSet
		}
		if d := metav1.GetControllerOfNoCopy(rs); d != nil && d.Kind == "Deployment" && groupOf(d.APIVersion) == "apps" {
			return OwnerDeployment
		}
		return OwnerReplicaSet
	}
	return OwnerOther
}

func groupOf(apiVersion string) string {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return ""
	}
	return gv.Group
}

// volumes resolves the pod's PVC and generic ephemeral volumes to their PVs. An
// ephemeral volume's claim counts only if the pod controls it, as the kubelet
// requires.
func (l *listers) volumes(pod *corev1.Pod) []VolumeInfo {
	var out []VolumeInfo
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		info := VolumeInfo{Name: v.Name}
		switch {
		case v.PersistentVolumeClaim != nil:
			info.Claim = v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			info.Claim, info.Ephemeral = pod.Name+"-"+v.Name, true
		default:
			continue
		}
		pvc, err := l.pvcs.PersistentVolumeClaims(pod.Namespace).Get(info.Claim)
		if err == nil && pvc.Spec.VolumeName != "" && (!info.Ephemeral || metav1.IsControlledBy(pvc, pod)) {
			if pv, err := l.pvs.Get(pvc.Spec.VolumeName); err == nil {
				info.PVName = pv.Name
				if pv.Spec.CSI != nil {
					info.Driver, info.Handle = pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle
				}
			}
		}
		out = append(out, info)
	}
	return out
}

// attachments lists the VolumeAttachments of one PV, on every node.
func (l *listers) attachments(pvName string) []Attachment {
	if pvName == "" {
		return nil
	}
	objs, err := l.attachmentsByPV.ByIndex(attachmentByPVIndex, pvName)
	if err != nil {
		return nil
	}
	out := make([]Attachment, 0, len(objs))
	for _, o := range objs {
		va, ok := o.(*storagev1.VolumeAttachment)
		if !ok {
			continue
		}
		out = append(out, Attachment{
			Name: va.Name, UID: va.UID, NodeName: va.Spec.NodeName, PVName: pvName,
			Deleting: va.DeletionTimestamp != nil,
		})
	}
	return out
}

// attachmentPV indexes VolumeAttachments by the PV they attach.
func attachmentPV(obj any) ([]string, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.Source.PersistentVolumeName == nil {
		return nil, nil
	}
	return []string{*va.Spec.Source.PersistentVolumeName}, nil
}

// podNode indexes cached pods by the node they are bound to.
func podNode(obj any) ([]string, error) {
	pod, ok := obj.(*cachedPod)
	if !ok || pod.NodeName == "" {
		return nil, nil
	}
	return []string{pod.NodeName}, nil
}
