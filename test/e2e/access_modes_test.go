package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil/sandbox"
)

// rwxRefusal is what the provisioner's ProvisioningFailed Event must say about
// a ReadWriteMany claim in Filesystem mode: the mode, and what is allowed.
const rwxRefusal = "access_mode MULTI_NODE_MULTI_WRITER with mount access is not supported: " +
	"a filesystem mounted read-write on more than one node is corrupted; allowed are block access (volumeMode: Block)"

// testAccessModes: through the real external-provisioner, a ReadWriteMany
// claim in Filesystem mode is refused (ProvisioningFailed naming the mode and
// what is allowed, no volume made), and the same claim in Block mode is
// provisioned.
func (e *loopEnv) testAccessModes(t *testing.T) {
	ctx := context.Background()
	c := e.s.Client()
	fs, block := corev1.PersistentVolumeFilesystem, corev1.PersistentVolumeBlock
	refused := rwxClaim("rwx-fs", e.stk.StorageClass, fs)
	allowed := rwxClaim("rwx-block", e.stk.StorageClass, block)
	for _, pvc := range []*corev1.PersistentVolumeClaim{refused, allowed} {
		_, err := c.CoreV1().PersistentVolumeClaims(loopNS).Create(ctx, pvc, metav1.CreateOptions{})
		must(t, err)
		name := pvc.Name
		t.Cleanup(func() { deleteClaimAndVolume(t, e, name) })
	}

	must(t, sandbox.WaitPVCsBound(ctx, c, loopNS, []string{allowed.Name}, 60*time.Second))
	t.Logf("ReadWriteMany Block claim %s is Bound", allowed.Name)

	var msg string
	must(t, sandbox.Poll(ctx, 60*time.Second, "ProvisioningFailed on claim "+refused.Name, func(ctx context.Context) (bool, string, error) {
		evs, err := c.CoreV1().Events(loopNS).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=PersistentVolumeClaim,involvedObject.name=" + refused.Name})
		if err != nil {
			return false, err.Error(), nil
		}
		var seen []string
		for _, ev := range evs.Items {
			if ev.Reason == "ProvisioningFailed" && strings.Contains(ev.Message, rwxRefusal) {
				msg = ev.Message
				return true, "", nil
			}
			seen = append(seen, ev.Reason+": "+ev.Message)
		}
		return false, fmt.Sprintf("events %q", seen), nil
	}, e.describe))
	t.Logf("ReadWriteMany Filesystem claim %s refused: %s", refused.Name, msg)

	pvc, err := c.CoreV1().PersistentVolumeClaims(loopNS).Get(ctx, refused.Name, metav1.GetOptions{})
	must(t, err)
	if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" {
		t.Errorf("refused claim %s: phase %s, volume %q; want Pending without a volume", refused.Name, pvc.Status.Phase, pvc.Spec.VolumeName)
	}
	vols, err := e.dp.ListVolumes(ctx)
	must(t, err)
	for _, v := range vols {
		if v.Name == "pvc-"+string(pvc.UID) {
			t.Errorf("the datapath made volume %+v for the refused claim", v)
		}
	}
}

func rwxClaim(name, class string, mode corev1.PersistentVolumeMode) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: loopNS, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: &class,
			VolumeMode:       &mode,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("64Mi")}},
		},
	}
}

// deleteClaimAndVolume deletes a claim and waits until its volume, if it had
// one, is gone, so the cases after this one find the datapath as it was.
func deleteClaimAndVolume(t *testing.T, e *loopEnv, name string) {
	ctx := context.Background()
	c := e.s.Client()
	pvc, err := c.CoreV1().PersistentVolumeClaims(loopNS).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Errorf("get claim %s: %v", name, err)
		return
	}
	if err := c.CoreV1().PersistentVolumeClaims(loopNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete claim %s: %v", name, err)
		return
	}
	if pvc.Spec.VolumeName == "" {
		return
	}
	err = sandbox.Poll(ctx, 60*time.Second, "PersistentVolume "+pvc.Spec.VolumeName+" deleted", func(ctx context.Context) (bool, string, error) {
		_, err := c.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), nil
	}, e.describe)
	if err != nil {
		t.Error(err)
	}
}
