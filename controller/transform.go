package controller

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vigil-storage/vigil"
)

// TransformForCache is the informer transform for every object the controllers
// cache: it keeps only the fields they read and drops the rest (managedFields,
// labels but the zone, containers, images, statuses), so 30,000 pods fit in a small manager.
// It builds a new object rather than editing its argument, and applying it twice
// gives the same result, as client-go requires of a transform.
func TransformForCache(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return slimPod(o), nil
	case *corev1.Node:
		return slimNode(o), nil
	case *corev1.PersistentVolumeClaim:
		return &corev1.PersistentVolumeClaim{
			TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(&o.ObjectMeta),
			Spec: corev1.PersistentVolumeClaimSpec{VolumeName: clone(o.Spec.VolumeName)},
		}, nil
	case *corev1.PersistentVolume:
		pv := &corev1.PersistentVolume{TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(&o.ObjectMeta)}
		if ref := o.Spec.ClaimRef; ref != nil {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: clone(ref.Namespace), Name: clone(ref.Name), UID: types.UID(clone(string(ref.UID)))}
		}
		if csi := o.Spec.CSI; csi != nil {
			pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: clone(csi.Driver), VolumeHandle: clone(csi.VolumeHandle)}
		}
		return pv, nil
	case *storagev1.VolumeAttachment:
		return &storagev1.VolumeAttachment{
			TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(&o.ObjectMeta),
			Spec: storagev1.VolumeAttachmentSpec{
				Attacher: clone(o.Spec.Attacher), NodeName: clone(o.Spec.NodeName),
				Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: clonePtr(o.Spec.Source.PersistentVolumeName)},
			},
			Status: storagev1.VolumeAttachmentStatus{Attached: o.Status.Attached},
		}, nil
	case *coordinationv1.Lease:
		return &coordinationv1.Lease{TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(&o.ObjectMeta), Spec: coordinationv1.LeaseSpec{
			RenewTime: o.Spec.RenewTime.DeepCopy(), LeaseDurationSeconds: clonePtrInt32(o.Spec.LeaseDurationSeconds),
		}}, nil
	case *appsv1.ReplicaSet:
		return &appsv1.ReplicaSet{TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(&o.ObjectMeta)}, nil
	case metav1.Object:
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// clone copies a string the slim object keeps, so it does not pin the memory of
// the decoded original (small strings share allocation blocks with the fields the
// transform drops; keeping one would keep the block).
func clone(s string) string { return strings.Clone(s) }

// slimMeta keeps identity, the deletion state and the controller reference.
func slimMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name: clone(m.Name), Namespace: clone(m.Namespace), UID: types.UID(clone(string(m.UID))),
		ResourceVersion: clone(m.ResourceVersion), DeletionGracePeriodSeconds: m.DeletionGracePeriodSeconds,
	}
	if m.DeletionTimestamp != nil {
		ts := *m.DeletionTimestamp
		out.DeletionTimestamp = &ts
	}
	if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
		yes := true
		out.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: clone(ref.APIVersion), Kind: clone(ref.Kind), Name: clone(ref.Name),
			UID: types.UID(clone(string(ref.UID))), Controller: &yes,
		}}
	}
	return out
}

func clonePtr(s *string) *string {
	if s == nil {
		return nil
	}
	c := clone(*s)
	return &c
}

func clonePtrInt32(p *int32) *int32 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func slimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: slimMeta(&p.ObjectMeta)}
	if v, ok := p.Annotations[vigil.ReapAnnotation]; ok {
		out.Annotations = map[string]string{vigil.ReapAnnotation: v}
	}
	out.Spec.NodeName = clone(p.Spec.NodeName)
	inline := false
	for i := range p.Spec.Volumes {
		v := &p.Spec.Volumes[i]
		switch kind := volumeKind(&v.VolumeSource); {
		case kind == kindClaim:
			out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: clone(v.Name), VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: clone(v.PersistentVolumeClaim.ClaimName)},
			}})
		case kind == kindEphemeral:
			out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: clone(v.Name), VolumeSource: corev1.VolumeSource{
				Ephemeral: &corev1.EphemeralVolumeSource{},
			}})
		case !inline && !isNodeLocalKind(kind):
			// The first inline volume that is not node-local, by its name and
			// kind only: it alone keeps the pod from ever being proven.
			inline = true
			out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: clone(v.Name), VolumeSource: sourceOfKind(kind)})
		}
	}
	out.Status.Phase = p.Status.Phase
	return out
}

func slimNode(n *corev1.Node) *corev1.Node {
	out := &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: slimMeta(&n.ObjectMeta)}
	// The zone: the control-plane outage rule counts nodes per zone.
	if z, ok := n.Labels[corev1.LabelTopologyZone]; ok {
		out.Labels = map[string]string{corev1.LabelTopologyZone: clone(z)}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == vigil.OutOfServiceTaintKey || t.Key == vigil.FencedTaintKey {
			out.Spec.Taints = append(out.Spec.Taints, t)
		}
	}
	if c := readyCondition(n); c != nil {
		out.Status.Conditions = []corev1.NodeCondition{{
			Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime,
		}}
	}
	// CSI volumes the node reports mounted: attachment recovery reads them.
	for _, v := range n.Status.VolumesInUse {
		if _, _, ok := parseUniqueVolumeName(string(v)); ok {
			out.Status.VolumesInUse = append(out.Status.VolumesInUse, corev1.UniqueVolumeName(clone(string(v))))
		}
	}
	return out
}

// TransformNode is TransformForCache for a Node read live (not from the cache).
func TransformNode(n *corev1.Node) *corev1.Node { return slimNode(n) }
