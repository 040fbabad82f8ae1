package controller

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/vigil-storage/vigil"
)

// memoryEnv enables TestController_Memory30kPods, which allocates a few hundred MB
// while building its lists and so stays out of the ordinary unit run:
//
//	VIGIL_MEASURE_MEMORY=1 go test -count=1 -run TestController_Memory30kPods -v ./controller
const memoryEnv = "VIGIL_MEASURE_MEMORY"

// realisticPod is what the API server returns for a typical pod of a
// StatefulSet: labels, annotations, managedFields, two containers with env,
// resources, probes and mounts, and a full status.
func realisticPod(i int) corev1.Pod {
	name := fmt.Sprintf("app-%d", i)
	fields := strings.Repeat(`{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:containers":{}}}`, 20)
	ctr := func(n string) corev1.Container {
		var env []corev1.EnvVar
		for e := range 8 {
			env = append(env, corev1.EnvVar{Name: fmt.Sprintf("ENV_%s_%d", n, e), Value: fmt.Sprintf("value-%d-%d", i, e)})
		}
		return corev1.Container{
			Name: n, Image: "registry.example.com/team/" + n + ":v1.2.3", Env: env,
			Command: []string{"/bin/server", "--config=/etc/app/config.yaml", "--port=8080"},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			},
			VolumeMounts:   []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "config", MountPath: "/etc/app"}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}},
		}
	}
	now := metav1.Now()
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: fmt.Sprintf("ns-%d", i%50), UID: types.UID(fmt.Sprintf("uid-%08d-0000-0000-0000-000000000000", i)),
			ResourceVersion: fmt.Sprint(1000 + i), CreationTimestamp: now,
			Labels:          map[string]string{"app": "app", "tier": "backend", "statefulset.kubernetes.io/pod-name": name, "controller-revision-hash": "app-7d9f8c"},
			Annotations:     map[string]string{"prometheus.io/scrape": "true", "kubectl.kubernetes.io/restartedAt": now.String()},
			OwnerReferences: controllerRef("apps/v1", "StatefulSet", "app", "uid-sts"),
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: fieldsV1(fields)},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: fieldsV1(fields), Subresource: "status"},
			},
		},
		Spec: corev1.PodSpec{
			NodeName: fmt.Sprintf("node-%d", i%300), Containers: []corev1.Container{ctr("app"), ctr("sidecar")},
			Volumes: []corev1.Volume{pvcVolume("data", "data-"+name),
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.1.2.3", HostIP: "192.168.0.10", StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}, {Type: corev1.PodInitialized, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", Ready: true, Image: "registry.example.com/team/app:v1.2.3", ImageID: "sha256:" + strings.Repeat("ab", 32), ContainerID: "containerd://" + strings.Repeat("cd", 32)},
				{Name: "sidecar", Ready: true, Image: "registry.example.com/team/sidecar:v1.2.3", ImageID: "sha256:" + strings.Repeat("ef", 32), ContainerID: "containerd://" + strings.Repeat("01", 32)},
			},
		},
	}
}

// listReactor answers a list with objects generated on demand, so the fake
// clientset's tracker holds nothing and only the informers keep objects.
func listReactor(gen func() kruntime.Object) core.ReactionFunc {
	return func(core.Action) (bool, kruntime.Object, error) { return true, gen(), nil }
}

func liveMB() float64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

func vmRSS(t *testing.T) string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(s.Text(), "VmRSS:"))
		}
	}
	return "?"
}

// TestController_Memory30kPods loads 30,000 realistic pods, 300 nodes, 10,000 each of
// PVCs, PVs and VolumeAttachments and 1,000 ReplicaSets through the reaper's
// informers and transform, then reports the process's VmRSS after a GC.
func TestController_Memory30kPods(t *testing.T) {
	if os.Getenv(memoryEnv) == "" {
		t.Skipf("set %s=1 to measure", memoryEnv)
	}
	const pods, nodes, vols, rss = 30000, 300, 10000, 1000
	runtime.GC()
	t.Logf("VmRSS at start %s, live heap %.1f MB", vmRSS(t), liveMB())
	client := fake.NewClientset()
	runtime.GC()
	t.Logf("VmRSS with the fake clientset %s, live heap %.1f MB", vmRSS(t), liveMB())
	client.PrependReactor("list", "pods", listReactor(func() kruntime.Object {
		l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "99999"}}
		for i := range pods {
			l.Items = append(l.Items, realisticPod(i))
		}
		return l
	}))
	client.PrependReactor("list", "nodes", listReactor(func() kruntime.Object {
		l := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "99999"}}
		for i := range nodes {
			n := newNode(fmt.Sprintf("node-%d", i), corev1.ConditionTrue, -time.Hour)
			for j := range 50 {
				n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: []string{fmt.Sprintf("registry.example.com/image-%d@sha256:%s", j, strings.Repeat("9", 64))}, SizeBytes: 1 << 28})
			}
			n.Labels = map[string]string{"kubernetes.io/hostname": n.Name, "topology.kubernetes.io/zone": "z1"}
			l.Items = append(l.Items, *n)
		}
		return l
	}))
	client.PrependReactor("list", "persistentvolumeclaims", listReactor(func() kruntime.Object {
		l := &corev1.PersistentVolumeClaimList{ListMeta: metav1.ListMeta{ResourceVersion: "99999"}}
		for i := range vols {
			l.Items = append(l.Items, *newPVC(fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("data-app-%d", i), fmt.Sprintf("pv-%d", i), nil))
		}
		return l
	}))
	client.PrependReactor("list", "persistentvolumes", listReactor(func() kruntime.Object {
		l := &corev1.PersistentVolumeList{ListMeta: metav1.ListMeta{ResourceVersion: "99999"}}
		for i := range vols {
			l.Items = append(l.Items, *newPV(fmt.Sprintf("pv-%d", i), vigil.DriverName))
		}
		return l
	}))
	client.PrependReactor("list", "volumeattachments", listReactor(func() kruntime.Object {
		l := &storagev1.VolumeAttachmentList{ListMeta: metav1.ListMeta{ResourceVersion: "99999"}}
		for i := range vols {
			l.Items = append(l.Items, *newVA(fmt.Sprintf("csi-%064d", i), fmt.Sprintf("pv-%d", i), fmt.Sprintf("node-%d", i%300)))
		}
		return l
	}))
	client.PrependReactor("list", "replicasets", listReactor(func() kruntime.Object {
		l := &appsv1.ReplicaSetList{ListMeta: metav1.ListMeta{ResourceVersion: "99999"}}
		for i := range rss {
			rs := newRS(fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("web-%d", i), types.UID(fmt.Sprint(i)), controllerRef("apps/v1", "Deployment", "web", "d"))
			p := realisticPod(i)
			rs.Spec.Template = corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: p.Labels}, Spec: p.Spec}
			l.Items = append(l.Items, *rs)
		}
		return l
	}))
	before := vmRSS(t)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(TransformForCache))
	m, _ := NewMetrics(prometheus.NewRegistry())
	r, err := New(Config{Client: client, Informers: factory, Settings: newFakeSettings(PolicyDeleteBoth), Recorder: &record.FakeRecorder{}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if !r.HasSynced() {
		t.Fatal("caches did not sync")
	}
	if got := len(r.podsByNode.List()); got != pods {
		t.Fatalf("%d pods cached, want %d", got, pods)
	}
	obj, _, _ := r.podsByNode.GetByKey("ns-7/app-7")
	if p, ok := obj.(*cachedPod); !ok || len(p.ManagedFields) != 0 || p.Labels != nil || len(p.Volumes) != 1 {
		t.Fatalf("pod not slimmed by the transform: %#v", obj)
	}
	runtime.GC()
	debug.FreeOSMemory()
	if out := os.Getenv("VIGIL_HEAP_PROFILE"); out != "" {
		f, err := os.Create(out)
		if err == nil {
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("VmRSS before informers %s; with %d pods, %d nodes, %d PVCs/PVs/VAs, %d ReplicaSets cached: VmRSS %s, heap in use %.1f MB, live %.1f MB",
		before, pods, nodes, vols, rss, vmRSS(t), float64(ms.HeapInuse)/(1<<20), float64(ms.HeapAlloc)/(1<<20))
}

func fieldsV1(s string) *metav1.FieldsV1 {
	f := &metav1.FieldsV1{}
	f.SetRawString(s)
	return f
}
