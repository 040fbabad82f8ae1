package kubelet

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	vigil "github.com/vigil-storage/vigil"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const (
	testNode = "node-a"
	testNS   = "default"
)

// fixture is a stand-in for testNode on a fake clientset, with its listers
// filled by hand (sample-controller style) and a real gRPC CSI test double.
type fixture struct {
	t      *testing.T
	root   string
	client *fake.Clientset
	inf    *informerSet
	csi    *fakeNode
	rec    *record.FakeRecorder
	clock  *clocktesting.FakeClock
	k      *kubelet
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	return newFixtureWith(t, func(*fakeNode) {}, objs...)
}

func newFixtureWith(t *testing.T, setup func(*fakeNode), objs ...runtime.Object) *fixture {
	t.Helper()
	root := t.TempDir()
	fn, client := startFakeNode(t, root)
	setup(fn)
	f := newFixtureOn(t, root, fn.endpoint, client, objs...)
	f.csi = fn
	return f
}

// newFixtureOn is a fixture whose stand-in calls the CSI node service at
// endpoint through client, with root as its kubelet directory.
func newFixtureOn(t *testing.T, root, endpoint string, csiClient nodeClient, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{t: t, root: root, rec: record.NewFakeRecorder(100),
		clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}, Status: corev1.NodeStatus{
		VolumesAttached: []corev1.AttachedVolume{{Name: "kubernetes.io/csi/driver.vigil.io^attached-by-adc", DevicePath: ""}}}}
	f.client = fake.NewClientset(node)
	cfg, err := Config{NodeName: testNode, Client: f.client, CSIEndpoint: endpoint, RootDir: f.root,
		Clock: f.clock, Recorder: f.rec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	f.inf = newInformers(cfg)
	f.add(objs...)
	f.k, err = newKubelet(cfg, csiClient, f.inf.pods, f.inf, f.rec)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// indexer returns the lister store obj belongs in.
func (f *fixture) indexer(obj runtime.Object) cache.Indexer {
	i := map[string]int{"pod": 0, "pvc": 1, "pv": 2, "va": 3, "driver": 4}
	var n int
	switch obj.(type) {
	case *corev1.Pod:
		n = i["pod"]
	case *corev1.PersistentVolumeClaim:
		n = i["pvc"]
	case *corev1.PersistentVolume:
		n = i["pv"]
	case *storagev1.VolumeAttachment:
		n = i["va"]
	case *storagev1.CSIDriver:
		n = i["driver"]
	default:
		f.t.Fatalf("no lister for %T", obj)
	}
	return f.inf.informers[n].GetIndexer()
}

func (f *fixture) add(objs ...runtime.Object) {
	for _, o := range objs {
		if err := f.indexer(o).Add(o); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) update(o runtime.Object) {
	if err := f.indexer(o).Update(o); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) remove(o runtime.Object) {
	if err := f.indexer(o).Delete(o); err != nil {
		f.t.Fatal(err)
	}
}

// sync runs syncOnce with inline execution until nothing is left to do.
func (f *fixture) sync() {
	f.t.Helper()
	for range 10 {
		n, err := f.k.syncOnce(context.Background(), func(p plan) { f.k.execute(context.Background(), p) })
		if err != nil {
			f.t.Fatalf("sync: %v", err)
		}
		if n == 0 {
			return
		}
	}
	f.t.Fatal("sync did not settle after 10 rounds")
}

// inUsePatches returns the volumesInUse of every status patch of the node.
func (f *fixture) inUsePatches() [][]string {
	var out [][]string
	for _, a := range f.client.Actions() {
		p, ok := a.(k8stesting.PatchAction)
		if !ok || a.GetResource().Resource != "nodes" || a.GetSubresource() != "status" {
			continue
		}
		var body struct {
			Status map[string]json.RawMessage `json:"status"`
		}
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			f.t.Fatal(err)
		}
		if len(body.Status) != 1 {
			f.t.Errorf("status patch %s touches more than volumesInUse", p.GetPatch())
		}
		var list []string
		if err := json.Unmarshal(body.Status["volumesInUse"], &list); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, list)
	}
	return out
}

// nodeInUse reads the node's volumesInUse from the fake API server.
func (f *fixture) nodeInUse() []string {
	n, err := f.client.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	if len(n.Status.VolumesAttached) != 1 {
		f.t.Errorf("volumesAttached changed: %v", n.Status.VolumesAttached)
	}
	var out []string
	for _, v := range n.Status.VolumesInUse {
		out = append(out, string(v))
	}
	return out
}

// events drains the recorded events.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func (f *fixture) warnings() []string {
	var out []string
	for _, e := range f.events() {
		if strings.HasPrefix(e, corev1.EventTypeWarning) {
			out = append(out, e)
		}
	}
	return out
}

// Objects.

func newPod(name string, vols ...corev1.Volume) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: testNode, Volumes: vols, ServiceAccountName: "default"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func claimVolume(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func ephemeralVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}
}

func newPVC(name, pv string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: pv},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
}

func newPV(name, handle string, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolume {
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes:  modes,
			MountOptions: []string{"noatime"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: vigil.DriverName, VolumeHandle: handle, FSType: "ext4",
				VolumeAttributes: map[string]string{"size": "1Gi"}}},
		},
	}
}

func newVA(pv, handle string, attached bool, epoch string) *storagev1.VolumeAttachment {
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: AttachmentName(handle, vigil.DriverName, testNode)},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: vigil.DriverName, NodeName: testNode,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)}},
		Status: storagev1.VolumeAttachmentStatus{Attached: attached},
	}
	if epoch != "" {
		va.Status.AttachmentMetadata = map[string]string{vigil.PublishContextEpochKey: epoch}
	}
	return va
}

// volume1 is PVC claim-1 → PV pv-1 (handle vol-1), attached with epoch 3.
func volume1() []runtime.Object {
	return []runtime.Object{newPVC("claim-1", "pv-1"), newPV("pv-1", "vol-1"), newVA("pv-1", "vol-1", true, "3")}
}

const inUse1 = "kubernetes.io/csi/driver.vigil.io^vol-1"
