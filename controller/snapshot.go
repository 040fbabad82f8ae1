package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// proofSource returns a node's grants as the fencing back end reports them.
type proofSource func(ctx context.Context, node string) (grantsView, error)

// listers are the informer caches a snapshot is read from.
type listers struct {
	nodes           corelisters.NodeLister
	pvcs            corelisters.PersistentVolumeClaimLister
	pvs             corelisters.PersistentVolumeLister
	replicaSets     appslisters.ReplicaSetLister
	attachmentsByPV cache.Indexer
}

// snapshot reads what decide needs about pod, whose node the caller resolved
// (nil: deleted, confirmed) and observed. It asks proof about the node's grants
// only when the fast trigger could use the answer: the trigger is on and Vigil
// fenced the node. Only volumes of the back end's own driver can be proven.
func (l *listers) snapshot(ctx context.Context, pod *corev1.Pod, node *corev1.Node, obs nodeObservation, set *Settings, proof proofSource) *Snapshot {
	s := &Snapshot{Pod: pod, Owner: l.ownerKind(pod)}
	if pod.Spec.NodeName == "" {
		return s
	}
	s.Node, s.NodeObserved = node, obs
	s.Volumes = l.volumes(pod)
	for i := range s.Volumes {
		s.Attachments = append(s.Attachments, l.attachments(s.Volumes[i].PVName)...)
	}
	if proof == nil || !set.FastFencedTrigger || !obs.Fenced || set.BackendDriver == "" {
		return s
	}
	view, err := proof(ctx, pod.Spec.NodeName)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("no fence proof for the pod's node; nothing is proven", "node", pod.Spec.NodeName, "err", err)
		return s
	}
	for i := range s.Volumes {
		v := &s.Volumes[i]
		v.Fenced = v.Handle != "" && v.Driver == set.BackendDriver && view.proven(v.Handle)
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

// volumes lists every volume of the pod that is not node-local: its PVC and
// generic ephemeral volumes, resolved to their PVs, and its inline volumes of
// any other kind (nfs, csi, …), which never resolve. An ephemeral volume's
// claim counts only if the pod controls it, as the kubelet requires.
func (l *listers) volumes(pod *corev1.Pod) []VolumeInfo {
	var out []VolumeInfo
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		info := VolumeInfo{Name: v.Name}
		switch kind := volumeKind(&v.VolumeSource); {
		case kind == kindClaim:
			info.Claim = v.PersistentVolumeClaim.ClaimName
		case kind == kindEphemeral:
			info.Claim, info.Ephemeral = pod.Name+"-"+v.Name, true
		case isNodeLocalKind(kind):
			continue
		default:
			info.Inline = kind
			out = append(out, info)
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
			Deleting: va.DeletionTimestamp != nil, Attached: va.Status.Attached,
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

// attachmentNode indexes VolumeAttachments by the node they attach to.
func attachmentNode(obj any) ([]string, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{va.Spec.NodeName}, nil
}

// pvHandle indexes PersistentVolumes by driver^handle of their CSI source.
func pvHandle(obj any) ([]string, error) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Spec.CSI == nil {
		return nil, nil
	}
	return []string{pv.Spec.CSI.Driver + "^" + pv.Spec.CSI.VolumeHandle}, nil
}

// podNode indexes cached pods by the node they are bound to.
func podNode(obj any) ([]string, error) {
	pod, ok := obj.(*cachedPod)
	if !ok || pod.NodeName == "" {
		return nil, nil
	}
	return []string{pod.NodeName}, nil
}
