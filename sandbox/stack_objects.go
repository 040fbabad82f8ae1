package sandbox

import (
	"context"
	"fmt"

	vigil "github.com/vigil-storage/vigil"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// createStackObjects creates what a deployment of Vigil and the kubelets'
// plugin registration would: the CSIDriver, the StorageClass and, per node, a
// CSINode naming the node as its CSI node id (the external-attacher looks the
// node id up there; on real nodes the kubelet writes it when the engine
// registers). Objects that exist are left as they are.
func (s *Sandbox) createStackObjects(ctx context.Context, stk *Stack, st *state) error {
	yes := true
	persistent := []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	drv := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: vigil.DriverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: &yes, PodInfoOnMount: &yes, VolumeLifecycleModes: persistent}}
	if _, err := s.client.StorageV1().CSIDrivers().Create(ctx, drv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("stack: create CSIDriver %s: %w", vigil.DriverName, err)
	}
	del := corev1.PersistentVolumeReclaimDelete
	immediate := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: stk.StorageClass},
		Provisioner: vigil.DriverName, ReclaimPolicy: &del, VolumeBindingMode: &immediate,
		Parameters: map[string]string{"csi.storage.k8s.io/fstype": "ext4"}}
	if _, err := s.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("stack: create StorageClass %s: %w", stk.StorageClass, err)
	}
	if st.Kubelet == KubeletReal {
		return nil // a real kubelet writes its CSINode when the engine registers
	}
	return forEach(st.k8sNodes(), func(name string) error {
		cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{
				Name: vigil.DriverName, NodeID: name, TopologyKeys: []string{vigil.TopologyNodeKey}}}}}
		if _, err := s.client.StorageV1().CSINodes().Create(ctx, cn, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("stack: create CSINode %s: %w", name, err)
		}
		return nil
	})
}
