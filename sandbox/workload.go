package sandbox

import (
	"context"
	"fmt"
	"path/filepath"

	vigil "github.com/vigil-storage/vigil"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// PauseImage is the image of the test workloads; kwok never pulls it.
const PauseImage = "registry.k8s.io/pause:3.10"

// Workload describes the pods of a test workload.
type Workload struct {
	// Namespace and Name of the workload; its pods carry the label app=Name.
	Namespace, Name string
	// Nodes, if set, limits the pods to these nodes (required node affinity on
	// kubernetes.io/hostname).
	Nodes []string
	// Prefer, if set, makes the scheduler prefer these nodes (preferred node
	// affinity): the first pods land there, replacements may go elsewhere.
	Prefer []string
	// Spread puts the workload's pods on distinct nodes (required pod anti-affinity).
	Spread bool
	// Claims are existing PVCs, each mounted at /data/<claim>.
	Claims []string
	// StorageClass, for a StatefulSet, adds a volumeClaimTemplate "data" of this
	// class (PVCs data-NAME-0, data-NAME-1, ...), of Size (default 1Gi).
	StorageClass string
	Size         string
	// TerminationGracePeriodSeconds of the pods; default 30 (Kubernetes' default).
	TerminationGracePeriodSeconds *int64
	// Image is the pods' container image; default PauseImage, which kwok
	// never pulls. On real nodes it must be one of the images the nodes
	// imported (Config.NodeImages): the container gets imagePullPolicy Never.
	Image string
	// WriterLedgerDir, if set, makes the pods' container the writer of the
	// writer image (sandbox/images; Image must be its reference), as the
	// chaos suite's writers on kwok nodes but in a real container: it appends
	// fsync'd records to its volume (the StatefulSet's "data", else the first
	// of Claims) and acknowledges each in LedgerFile(WriterLedgerDir, its pod's
	// UID), a directory of the host mounted into the container (hostPath,
	// node-local as the reaper requires). The pods run as the image's user
	// with that group as fsGroup, so the kubelet hands them the volume.
	WriterLedgerDir string
}

// WriterUID is the user and group the writer image runs as (its fsGroup).
const WriterUID = 65532

// LedgerFile is the ledger of the writer of pod podUID in a workload's
// WriterLedgerDir dir.
func LedgerFile(dir, podUID string) string { return filepath.Join(dir, podUID+".ledger") }

// Selector is the label selector of the workload's pods.
func (w Workload) Selector() string { return "app=" + w.Name }

func (w Workload) labels() map[string]string { return map[string]string{"app": w.Name} }

func (w Workload) podSpec(restart corev1.RestartPolicy) corev1.PodSpec {
	spec := corev1.PodSpec{
		RestartPolicy:                 restart,
		TerminationGracePeriodSeconds: w.TerminationGracePeriodSeconds,
		Containers:                    []corev1.Container{{Name: "main", Image: PauseImage}},
	}
	if w.Image != "" {
		spec.Containers[0].Image, spec.Containers[0].ImagePullPolicy = w.Image, corev1.PullNever
	}
	w.addAffinity(&spec)
	for _, c := range w.Claims {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts,
			corev1.VolumeMount{Name: c, MountPath: "/data/" + c})
	}
	if w.WriterLedgerDir != "" && len(w.Claims) > 0 {
		w.addWriter(&spec, "/data/"+w.Claims[0])
	}
	return spec
}

// addWriter makes spec's container the writer of the volume mounted at dir
// (WriterLedgerDir).
func (w Workload) addWriter(spec *corev1.PodSpec, dir string) {
	const ledgerMount = "/ledger"
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "ledger", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: w.WriterLedgerDir, Type: &dirOrCreate}}})
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "ledger", MountPath: ledgerMount})
	c.Env = []corev1.EnvVar{
		{Name: "POD_UID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
		{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
	}
	// The image's entrypoint is the writer; these are its flags.
	c.Args = []string{"--dir", dir, "--pod-uid", "$(POD_UID)", "--node", "$(NODE_NAME)",
		"--ledger", LedgerFile(ledgerMount, "$(POD_UID)")}
	group := int64(WriterUID)
	spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: &group}
}

func (w Workload) addAffinity(spec *corev1.PodSpec) {
	hostIn := func(nodes []string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: nodes}}}
	}
	a := &corev1.Affinity{}
	if len(w.Nodes) > 0 || len(w.Prefer) > 0 {
		a.NodeAffinity = &corev1.NodeAffinity{}
	}
	if len(w.Nodes) > 0 {
		a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{hostIn(w.Nodes)}}
	}
	if len(w.Prefer) > 0 {
		a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.PreferredSchedulingTerm{
			{Weight: 100, Preference: hostIn(w.Prefer)}}
	}
	if w.Spread {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: w.labels()}, TopologyKey: corev1.LabelHostname}}}
	}
	if a.NodeAffinity != nil || a.PodAntiAffinity != nil {
		spec.Affinity = a
	}
}

func (w Workload) template(restart corev1.RestartPolicy) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: w.labels()}, Spec: w.podSpec(restart)}
}

// StatefulSet builds a StatefulSet of replicas pods.
func (w Workload) StatefulSet(replicas int32) *appsv1.StatefulSet {
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name, Labels: w.labels()},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, ServiceName: w.Name,
			Selector: &metav1.LabelSelector{MatchLabels: w.labels()},
			Template: w.template(corev1.RestartPolicyAlways),
		},
	}
	if w.StorageClass != "" {
		ss.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{*claim("", "data", w.StorageClass, w.Size, "")}
		ss.Spec.Template.Spec.Containers[0].VolumeMounts = append(ss.Spec.Template.Spec.Containers[0].VolumeMounts,
			corev1.VolumeMount{Name: "data", MountPath: "/data/data"})
		if w.WriterLedgerDir != "" && len(w.Claims) == 0 {
			w.addWriter(&ss.Spec.Template.Spec, "/data/data")
		}
	}
	return ss
}

// Deployment builds a Deployment of replicas pods.
func (w Workload) Deployment(replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name, Labels: w.labels()},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: w.labels()},
			// Recreate: a replacement never runs beside the pod that holds the volume.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: w.template(corev1.RestartPolicyAlways),
		},
	}
}

// DaemonSet builds a DaemonSet (on w.Nodes if set).
func (w Workload) DaemonSet() *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name, Labels: w.labels()},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: w.labels()},
			Template: w.template(corev1.RestartPolicyAlways),
		},
	}
}

// Job builds a Job of one pod. Note that kwok's default stages complete a Job's
// pod right after it runs (phase Succeeded): wait for it to be scheduled, not to
// keep running.
func (w Workload) Job() *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name, Labels: w.labels()},
		Spec:       batchv1.JobSpec{Template: w.template(corev1.RestartPolicyNever)},
	}
}

// Pod builds a bare pod named w.Name.
func (w Workload) Pod() *corev1.Pod {
	t := w.template(corev1.RestartPolicyAlways)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name, Labels: t.Labels}, Spec: t.Spec}
}

func claim(ns, name, class, size, volumeName string) *corev1.PersistentVolumeClaim {
	if size == "" {
		size = "1Gi"
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			VolumeName:       volumeName,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
}

// EnsureNamespace creates namespace ns unless it exists.
func EnsureNamespace(ctx context.Context, c kubernetes.Interface, ns string) error {
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}

// EnsureCSIDriver creates the CSIDriver driver.vigil.io (attachRequired as given)
// unless it exists.
func EnsureCSIDriver(ctx context.Context, c kubernetes.Interface, attachRequired bool) error {
	d := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: vigil.DriverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: &attachRequired}}
	_, err := c.StorageV1().CSIDrivers().Create(ctx, d, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CSIDriver %s: %w", vigil.DriverName, err)
	}
	return nil
}

// EnsureStorageClass creates StorageClass name of provisioner driver.vigil.io
// (WaitForFirstConsumer) unless it exists.
func EnsureStorageClass(ctx context.Context, c kubernetes.Interface, name string) error {
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: vigil.DriverName,
		VolumeBindingMode: &mode}
	_, err := c.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create StorageClass %s: %w", name, err)
	}
	return nil
}

// StaticClaimClass is the storage class name of static volumes; no StorageClass
// object of that name is needed.
const StaticClaimClass = "vigil-static"

// CreateStaticVolume creates a PersistentVolume of CSI driver driver.vigil.io
// (volume handle = PV name "pv-<ns>-<claim>") pre-bound to a new PVC ns/claim, and
// the PVC. For a StatefulSet, use the claim names data-NAME-0, data-NAME-1, ...
// with Workload.StorageClass = StaticClaimClass.
func CreateStaticVolume(ctx context.Context, c kubernetes.Interface, ns, claimName, size string) error {
	if size == "" {
		size = "1Gi"
	}
	pvName := "pv-" + ns + "-" + claimName
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              StaticClaimClass,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: claimName},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: vigil.DriverName, VolumeHandle: pvName, FSType: "ext4"}},
		},
	}
	if _, err := c.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PV %s: %w", pvName, err)
	}
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim(ns, claimName, StaticClaimClass, size, pvName),
		metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PVC %s/%s: %w", ns, claimName, err)
	}
	return nil
}

// CreateClaim creates PVC ns/name of storageClass (a dynamically provisioned
// volume when the class has a provisioner), of size (default 1Gi).
func CreateClaim(ctx context.Context, c kubernetes.Interface, ns, name, storageClass, size string) error {
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim(ns, name, storageClass, size, ""),
		metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PVC %s/%s: %w", ns, name, err)
	}
	return nil
}
