package kubelet

import (
	"crypto/sha256"
	"fmt"
	"maps"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
)

// provisionedByAnnotation is set by the external-provisioner on the PVs it
// creates; a PV of ours without a CSI source is bad input, not someone else's.
const provisionedByAnnotation = "pv.kubernetes.io/provisioned-by"

// Keys the kubelet puts in the volume context when the CSIDriver has
// podInfoOnMount: true.
const (
	podNameKey        = "csi.storage.k8s.io/pod.name"
	podNamespaceKey   = "csi.storage.k8s.io/pod.namespace"
	podUIDKey         = "csi.storage.k8s.io/pod.uid"
	serviceAccountKey = "csi.storage.k8s.io/serviceAccount.name"
	ephemeralKey      = "csi.storage.k8s.io/ephemeral"
)

// objects is what resolving pod volumes reads: PVCs, PVs, VolumeAttachments
// and the CSIDriver (listers in Run, the same listers filled by hand in tests).
type objects interface {
	PVC(namespace, name string) (*corev1.PersistentVolumeClaim, bool)
	PV(name string) (*corev1.PersistentVolume, bool)
	VA(name string) (*storagev1.VolumeAttachment, bool)
	Driver(name string) (*storagev1.CSIDriver, bool)
}

// podRef is the pod a publish is for.
type podRef struct {
	UID            types.UID
	Namespace      string
	Name           string
	ServiceAccount string
}

// volumeSpec is what the PV says about how to stage and publish a volume.
type volumeSpec struct {
	Handle        string
	PVName        string
	Block         bool
	FsType        string
	MountFlags    []string
	AccessMode    csi.VolumeCapability_AccessMode_Mode
	VolumeContext map[string]string
	ReadOnly      bool // the PV's csi.readOnly
}

// podUse is one pod's use of a volume.
type podUse struct {
	Pod      podRef
	ReadOnly bool
	// New is false for a terminating pod: it keeps what is mounted but gets
	// nothing new (the kubelet mounts nothing for a pod being torn down).
	New bool
}

// desiredVolume is one volume some pod on this node wants.
type desiredVolume struct {
	Spec           volumeSpec
	Attached       bool
	PublishContext map[string]string
	PodInfo        bool // CSIDriver podInfoOnMount
	Pods           map[types.UID]podUse
}

// problem is a pod volume only a person can fix: it becomes a Warning event.
type problem struct {
	Pod    podRef
	Volume string // the pod's name for the volume
	Reason string
	Msg    string
}

// resolver turns the pods of one node into the volumes they want.
type resolver struct {
	node, driver string
	obj          objects
}

// desired returns, by volume handle, every volume of the driver that a live
// pod of pods wants, with its attachment state; and the problems found.
// Volumes that are not the driver's, and claims not bound yet, are skipped.
func (r resolver) desired(pods []*corev1.Pod) (map[string]*desiredVolume, []problem) {
	want := map[string]*desiredVolume{}
	var probs []problem
	for _, pod := range pods {
		if pod.Spec.NodeName != r.node || isTerminal(pod) {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			spec, readOnly, ok, prob := r.resolve(pod, v)
			if prob != nil {
				probs = append(probs, *prob)
			}
			if !ok {
				continue
			}
			d := want[spec.Handle]
			if d == nil {
				d = &desiredVolume{Spec: spec, Pods: map[types.UID]podUse{}}
				r.attachment(d)
				want[spec.Handle] = d
			}
			ref := podRef{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, ServiceAccount: pod.Spec.ServiceAccountName}
			d.Pods[pod.UID] = podUse{Pod: ref, ReadOnly: readOnly || spec.ReadOnly, New: pod.DeletionTimestamp == nil}
		}
	}
	return want, probs
}

// isTerminal: the pod's containers are done; its volumes may go.
func isTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// resolve follows pod volume v to the driver's PV. ok is false for a volume
// that is not (yet) the driver's to mount; prob names bad input.
func (r resolver) resolve(pod *corev1.Pod, v corev1.Volume) (spec volumeSpec, readOnly, ok bool, prob *problem) {
	ref := podRef{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name}
	bad := func(format string, args ...any) *problem {
		return &problem{Pod: ref, Volume: v.Name, Reason: ReasonFailedMount, Msg: fmt.Sprintf(format, args...)}
	}
	var claim string
	switch {
	case v.PersistentVolumeClaim != nil:
		claim, readOnly = v.PersistentVolumeClaim.ClaimName, v.PersistentVolumeClaim.ReadOnly
	case v.Ephemeral != nil:
		claim = pod.Name + "-" + v.Name
	default:
		return spec, false, false, nil
	}
	pvc, found := r.obj.PVC(pod.Namespace, claim)
	if !found || pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
		return spec, false, false, nil // not bound yet: wait, as the kubelet does
	}
	if v.Ephemeral != nil && !ownedBy(pvc, pod.UID) {
		return spec, false, false, bad("volume %q: PVC %s/%s was not created for pod %s/%s (not its controller owner); "+
			"a generic ephemeral volume must use the claim the ephemeral volume controller made for it", v.Name, pvc.Namespace, claim, pod.Namespace, pod.Name)
	}
	pv, found := r.obj.PV(pvc.Spec.VolumeName)
	if !found {
		return spec, false, false, nil
	}
	src := pv.Spec.CSI
	if src == nil {
		if pv.Annotations[provisionedByAnnotation] == r.driver {
			return spec, false, false, bad("volume %q: PV %s was provisioned by %s but has no spec.csi source; it cannot be staged", v.Name, pv.Name, r.driver)
		}
		return spec, false, false, nil
	}
	if src.Driver != r.driver {
		return spec, false, false, nil
	}
	if src.VolumeHandle == "" {
		return spec, false, false, bad("volume %q: PV %s of driver %s has an empty spec.csi.volumeHandle", v.Name, pv.Name, r.driver)
	}
	mode, err := accessMode(pv.Spec.AccessModes)
	if err != nil {
		return spec, false, false, bad("volume %q: PV %s: %v", v.Name, pv.Name, err)
	}
	spec = volumeSpec{
		Handle: src.VolumeHandle, PVName: pv.Name, FsType: src.FSType, MountFlags: pv.Spec.MountOptions,
		AccessMode: mode, VolumeContext: maps.Clone(src.VolumeAttributes), ReadOnly: src.ReadOnly,
		Block: pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock,
	}
	return spec, readOnly, true, nil
}

func ownedBy(pvc *corev1.PersistentVolumeClaim, uid types.UID) bool {
	for _, o := range pvc.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.UID == uid {
			return true
		}
	}
	return false
}

// accessMode maps PV access modes to the CSI access mode as the kubelet does
// for a driver without the SINGLE_NODE_MULTI_WRITER capability.
func accessMode(modes []corev1.PersistentVolumeAccessMode) (csi.VolumeCapability_AccessMode_Mode, error) {
	has := map[corev1.PersistentVolumeAccessMode]bool{}
	for _, m := range modes {
		has[m] = true
	}
	switch {
	case has[corev1.ReadWriteMany]:
		return csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, nil
	case has[corev1.ReadOnlyMany] && !has[corev1.ReadWriteOnce]:
		return csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, nil
	case has[corev1.ReadWriteOnce]:
		return csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, nil
	case has[corev1.ReadWriteOncePod]:
		return csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, nil
	}
	return csi.VolumeCapability_AccessMode_UNKNOWN, fmt.Errorf("spec.accessModes %v: allowed: ReadWriteOnce, ReadOnlyMany, ReadWriteMany, ReadWriteOncePod", modes)
}

// attachment fills in whether d is attached to this node and its publish
// context, from the VolumeAttachment the attach-detach controller names
// csi-sha256(handle+driver+node). A CSIDriver with attachRequired: false needs
// none (and gives no publish context); a missing CSIDriver means attach required.
func (r resolver) attachment(d *desiredVolume) {
	required := true
	if drv, ok := r.obj.Driver(r.driver); ok {
		if drv.Spec.AttachRequired != nil {
			required = *drv.Spec.AttachRequired
		}
		d.PodInfo = drv.Spec.PodInfoOnMount != nil && *drv.Spec.PodInfoOnMount
	}
	if !required {
		d.Attached = true
		return
	}
	va, ok := r.obj.VA(AttachmentName(d.Spec.Handle, r.driver, r.node))
	if !ok || va.Spec.NodeName != r.node || va.Spec.Attacher != r.driver ||
		va.Spec.Source.PersistentVolumeName == nil || *va.Spec.Source.PersistentVolumeName != d.Spec.PVName {
		return
	}
	d.Attached = va.Status.Attached
	d.PublishContext = maps.Clone(va.Status.AttachmentMetadata)
}

// AttachmentName is the name the attach-detach controller (and the kubelet,
// to find it) gives the VolumeAttachment of a CSI volume on a node.
func AttachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// volumeContext is what NodePublishVolume gets: the PV's attributes plus, with
// podInfoOnMount, the pod's identity.
func volumeContext(d *desiredVolume, p podRef) map[string]string {
	vc := maps.Clone(d.Spec.VolumeContext)
	if !d.PodInfo {
		return vc
	}
	if vc == nil {
		vc = map[string]string{}
	}
	vc[podNameKey], vc[podNamespaceKey], vc[podUIDKey] = p.Name, p.Namespace, string(p.UID)
	vc[serviceAccountKey], vc[ephemeralKey] = p.ServiceAccount, "false"
	return vc
}
