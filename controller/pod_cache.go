package controller

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// cachedPod is what the controller keeps per pod: a few hundred bytes instead of a
// corev1.Pod's 1.2 KB of struct alone, which is what lets 30,000 pods fit in the
// manager's memory budget. It is a runtime.Object so an informer can store it;
// pod() turns it back into the *corev1.Pod the decision reads.
type cachedPod struct {
	metav1.ObjectMeta // slimmed by slimMeta, plus the opt-out annotation
	NodeName          string
	Volumes           []cachedVolume
	// Inline is the pod's first volume that is neither a claim nor node-local
	// (an inline nfs, iscsi, CSI, … volume): by name and kind only, nil for
	// almost every pod. Such a pod is never proven, so one is all it takes.
	Inline *inlineVolume
	Phase  corev1.PodPhase
	// CrashLoopRestarts is the highest restart count among the pod's containers
	// waiting in CrashLoopBackOff; 0 when none is.
	CrashLoopRestarts int32
}

// cachedVolume is one PVC or generic ephemeral volume of a pod.
type cachedVolume struct {
	Name, Claim string
	Ephemeral   bool
}

// inlineVolume names one inline volume that is not node-local.
type inlineVolume struct{ Name, Kind string }

// GetObjectKind implements runtime.Object; cached pods carry no type metadata.
func (p *cachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (p *cachedPod) DeepCopyObject() runtime.Object {
	c := *p
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.Volumes = slices.Clone(p.Volumes)
	if p.Inline != nil {
		in := *p.Inline
		c.Inline = &in
	}
	return &c
}

// toCachedPod converts a pod as the API returns it (or an already slim one).
func toCachedPod(p *corev1.Pod) *cachedPod {
	s := slimPod(p)
	c := &cachedPod{ObjectMeta: s.ObjectMeta, NodeName: s.Spec.NodeName, Phase: s.Status.Phase, CrashLoopRestarts: crashLoopRestarts(p)}
	if len(s.Spec.Volumes) > 0 {
		c.Volumes = make([]cachedVolume, 0, len(s.Spec.Volumes))
		for _, v := range s.Spec.Volumes {
			switch kind := volumeKind(&v.VolumeSource); kind {
			case kindClaim, kindEphemeral:
				cv := cachedVolume{Name: v.Name, Ephemeral: kind == kindEphemeral}
				if kind == kindClaim {
					cv.Claim = v.PersistentVolumeClaim.ClaimName
				}
				c.Volumes = append(c.Volumes, cv)
			default: // slimPod kept only the first inline volume that is not node-local
				c.Inline = &inlineVolume{Name: v.Name, Kind: kind}
			}
		}
	}
	return c
}

// pod rebuilds the fields of a *corev1.Pod the controller reads.
func (p *cachedPod) pod() *corev1.Pod {
	out := &corev1.Pod{ObjectMeta: *p.ObjectMeta.DeepCopy()}
	out.Spec.NodeName = p.NodeName
	out.Status.Phase = p.Phase
	if p.CrashLoopRestarts > 0 {
		out.Status.ContainerStatuses = []corev1.ContainerStatus{{RestartCount: p.CrashLoopRestarts,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reasonCrashLoopBackOff}}}}
	}
	for _, v := range p.Volumes {
		vol := corev1.Volume{Name: v.Name}
		if v.Ephemeral {
			vol.Ephemeral = &corev1.EphemeralVolumeSource{}
		} else {
			vol.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.Claim}
		}
		out.Spec.Volumes = append(out.Spec.Volumes, vol)
	}
	if p.Inline != nil {
		out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: p.Inline.Name, VolumeSource: sourceOfKind(p.Inline.Kind)})
	}
	return out
}

// podCacheTransform is the pod informer's transform: *corev1.Pod in, *cachedPod
// out; anything else (a tombstone, an already cached pod) passes through.
func podCacheTransform(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		return toCachedPod(p), nil
	}
	return obj, nil
}

// reasonCrashLoopBackOff is the kubelet's waiting reason for a container it
// restarts with back-off after repeated failures.
const reasonCrashLoopBackOff = "CrashLoopBackOff"

// crashLoopRestarts is the highest restart count among the containers (init
// containers included) waiting in CrashLoopBackOff.
func crashLoopRestarts(p *corev1.Pod) int32 {
	var n int32
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, c := range list {
			if w := c.State.Waiting; w != nil && w.Reason == reasonCrashLoopBackOff && c.RestartCount > n {
				n = c.RestartCount
			}
		}
	}
	return n
}

// ownerKeyOf names a pod's controller: namespace/Kind/name ("" for none).
func ownerKeyOf(namespace string, refs []metav1.OwnerReference) string {
	if o := ownerOf(refs); o != "" {
		return namespace + "/" + o
	}
	return ""
}

// podOwner indexes cached pods by their controller (ownerKeyOf).
func podOwner(obj any) ([]string, error) {
	pod, ok := obj.(*cachedPod)
	if !ok {
		return nil, nil
	}
	if k := ownerKeyOf(pod.Namespace, pod.OwnerReferences); k != "" {
		return []string{k}, nil
	}
	return nil, nil
}

// podClaims indexes cached pods by the claims they use: namespace/claim (a
// generic ephemeral volume's claim is pod-volume).
func podClaims(obj any) ([]string, error) {
	pod, ok := obj.(*cachedPod)
	if !ok || len(pod.Volumes) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(pod.Volumes))
	for _, v := range pod.Volumes {
		claim := v.Claim
		if v.Ephemeral {
			claim = pod.Name + "-" + v.Name
		}
		out = append(out, pod.Namespace+"/"+claim)
	}
	return out, nil
}

// keepCachedPod is the pod cache's keepFunc: a cachedPod of each listed pod,
// which spares the start even the 1.2 KB of struct a slim corev1.Pod weighs.
func keepCachedPod(o runtime.Object) (runtime.Object, error) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("controller: a pod list held a %T", o)
	}
	return toCachedPod(p), nil
}

// podCacheInformer registers, in the factory, the controller's own pod informer: it
// lists and watches pods but stores cachedPods, indexed by node. It is keyed by
// the cachedPod type, so anyone else asking the factory for the ordinary pod
// informer gets an ordinary one.
func podCacheInformer(f informers.SharedInformerFactory) (cache.SharedIndexInformer, error) {
	inf := f.InformerFor(&cachedPod{}, func(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		list, watch := calls(client.CoreV1().Pods(metav1.NamespaceAll))
		return compactInformer(client, &corev1.Pod{}, resync,
			cache.Indexers{nodeIndex: podNode, ownerIndex: podOwner, claimIndex: podClaims}, list, keepCachedPod, watch)
	})
	// The factory installs its own transform; the pod cache needs this one.
	if err := inf.SetTransform(podCacheTransform); err != nil {
		return nil, err
	}
	return inf, nil
}
