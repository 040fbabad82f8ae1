package sandbox

import (
	"context"
	"fmt"
	"testing"

	vigil "github.com/vigil-storage/vigil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestWorkload_PodSpec_PlacementAndClaims(t *testing.T) {
	w := Workload{Namespace: "ns", Name: "app", Nodes: []string{"node-1", "node-2"}, Prefer: []string{"node-1"},
		Spread: true, Claims: []string{"c1"}}
	spec := w.Deployment(1).Spec.Template.Spec
	req := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0]
	if req.Key != corev1.LabelHostname || len(req.Values) != 2 {
		t.Errorf("required node affinity = %+v, want hostname in [node-1 node-2]", req)
	}
	if p := spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution; len(p) != 1 || p[0].Preference.MatchExpressions[0].Values[0] != "node-1" {
		t.Errorf("preferred node affinity = %+v, want node-1", p)
	}
	if a := spec.Affinity.PodAntiAffinity; a == nil || a.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != corev1.LabelHostname {
		t.Errorf("pod anti-affinity = %+v, want one per hostname", a)
	}
	if len(spec.Volumes) != 1 || spec.Volumes[0].PersistentVolumeClaim.ClaimName != "c1" ||
		spec.Containers[0].VolumeMounts[0].MountPath != "/data/c1" {
		t.Errorf("volumes %+v mounts %+v, want claim c1 at /data/c1", spec.Volumes, spec.Containers[0].VolumeMounts)
	}
}

func TestWorkload_NoPlacement_NoAffinity(t *testing.T) {
	w := Workload{Namespace: "ns", Name: "j"}
	if a := w.Job().Spec.Template.Spec.Affinity; a != nil {
		t.Errorf("affinity = %+v, want none", a)
	}
	if r := w.Job().Spec.Template.Spec.RestartPolicy; r != corev1.RestartPolicyNever {
		t.Errorf("job restart policy = %s, want Never", r)
	}
	if p := w.Pod(); p.Name != "j" || p.Labels["app"] != "j" {
		t.Errorf("pod = %s %v", p.Name, p.Labels)
	}
	if ds := w.DaemonSet(); ds.Spec.Selector.MatchLabels["app"] != "j" {
		t.Errorf("daemonset selector = %v", ds.Spec.Selector)
	}
}

func TestCreateStaticVolume_PreBound(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	if err := CreateStaticVolume(ctx, c, "ns", "data-web-0", ""); err != nil {
		t.Fatal(err)
	}
	pv, err := c.CoreV1().PersistentVolumes().Get(ctx, "pv-ns-data-web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.CSI.Driver != vigil.DriverName || pv.Spec.ClaimRef.Name != "data-web-0" || pv.Spec.StorageClassName != StaticClaimClass {
		t.Errorf("pv = %+v", pv.Spec)
	}
	pvc, err := c.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "data-web-0", metav1.GetOptions{})
	if err != nil || pvc.Spec.VolumeName != pv.Name {
		t.Errorf("pvc = %+v, %v; want bound to %s", pvc, err, pv.Name)
	}
	if err := CreateStaticVolume(ctx, c, "ns", "data-web-0", ""); err == nil {
		t.Error("second CreateStaticVolume of the same claim succeeded, want an error")
	}
}

func TestWorkload_Writer_ContainerWritesItsVolume(t *testing.T) {
	for name, spec := range map[string]corev1.PodSpec{
		"statefulset template": Workload{Namespace: "ns", Name: "w", StorageClass: "vigil", Image: "localhost/vigil-writer:dev",
			WriterLedgerDir: "/host/ledgers"}.StatefulSet(1).Spec.Template.Spec,
		"claims": Workload{Namespace: "ns", Name: "w", Claims: []string{"data"}, Image: "localhost/vigil-writer:dev",
			WriterLedgerDir: "/host/ledgers"}.Pod().Spec,
	} {
		c := spec.Containers[0]
		if c.Image != "localhost/vigil-writer:dev" || c.ImagePullPolicy != corev1.PullNever {
			t.Errorf("%s: image %q pull %q, want the imported writer image, never pulled", name, c.Image, c.ImagePullPolicy)
		}
		want := []string{"--dir", "/data/data", "--pod-uid", "$(POD_UID)", "--node", "$(NODE_NAME)", "--ledger", "/ledger/$(POD_UID).ledger"}
		if fmt.Sprint(c.Args) != fmt.Sprint(want) {
			t.Errorf("%s: args %q, want %q", name, c.Args, want)
		}
		var hostPath string
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				hostPath = v.HostPath.Path
			}
		}
		if hostPath != "/host/ledgers" || len(c.Env) != 2 || spec.SecurityContext == nil || *spec.SecurityContext.FSGroup != WriterUID {
			t.Errorf("%s: ledger hostPath %q, env %+v, security %+v; want the ledger directory, the pod's UID and node, fsGroup %d",
				name, hostPath, c.Env, spec.SecurityContext, WriterUID)
		}
	}
	if spec := (Workload{Namespace: "ns", Name: "p", Claims: []string{"c"}}).Pod().Spec; spec.Containers[0].Image != PauseImage ||
		spec.Containers[0].Args != nil || spec.SecurityContext != nil {
		t.Errorf("a workload without Image or WriterLedgerDir: %+v, want the pause container as before", spec)
	}
}
