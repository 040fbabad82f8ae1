package deploy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/deploy"
	"github.com/vigil-storage/vigil/deploy/deploytest"
	"github.com/vigil-storage/vigil/settings"
)

// kustomizations are every directory `kubectl apply -k` is meant for.
var kustomizations = []string{".", "base", "overlays/dev", "overlays/sandbox"}

func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := deploytest.Build(filepath.Join(deploytest.Dir(), dir))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// clusterScoped are the kinds of the manifests that live outside a namespace.
var clusterScoped = map[string]bool{
	"Namespace": true, "CustomResourceDefinition": true, "PriorityClass": true, "CSIDriver": true,
	"StorageClass": true, "PersistentVolume": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

func TestKustomization_Build_EveryObjectParses(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			objs := build(t, dir)
			seen := map[string]bool{}
			for _, o := range objs {
				id := o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
				if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
					t.Errorf("%s: apiVersion, kind and name are required", id)
				}
				if seen[id] {
					t.Errorf("%s twice", id)
				}
				seen[id] = true
				if !clusterScoped[o.GetKind()] && o.GetNamespace() != vigil.Namespace {
					t.Errorf("%s: namespace %q, want %s", id, o.GetNamespace(), vigil.Namespace)
				}
				if clusterScoped[o.GetKind()] && o.GetNamespace() != "" {
					t.Errorf("%s is cluster-scoped but has namespace %q", id, o.GetNamespace())
				}
				if o.GetLabels()["app.kubernetes.io/part-of"] != "vigil" {
					t.Errorf("%s: no label app.kubernetes.io/part-of=vigil", id)
				}
				if typed := typedFor(o.GetKind()); typed != nil {
					if err := deploytest.Decode(o, typed); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
}

// TestKustomization_Build_RootIsBase: `kubectl apply -k deploy/` applies the
// base and nothing else.
func TestKustomization_Build_RootIsBase(t *testing.T) {
	root, base := build(t, "."), build(t, "base")
	if !reflect.DeepEqual(root, base) {
		t.Errorf("deploy/ builds %d objects that differ from deploy/base's %d", len(root), len(base))
	}
}

// TestBase_Build_Components names what the base must install.
func TestBase_Build_Components(t *testing.T) {
	objs := build(t, "base")
	for _, want := range []struct{ kind, name string }{
		{"Namespace", vigil.Namespace},
		{"CustomResourceDefinition", "noderecoveries.vigil.io"},
		{"PriorityClass", "vigil-node-critical"}, {"PriorityClass", "vigil-cluster-critical"},
		{"ServiceAccount", "vigil-manager"}, {"ServiceAccount", "vigil-datapath"},
		{"ServiceAccount", "vigil-csi-controller"}, {"ServiceAccount", "vigil-engine-node"},
		{"Deployment", "vigil-manager"}, {"Service", "vigil-manager"}, {"PodDisruptionBudget", "vigil-manager"},
		{"ConfigMap", "vigil-settings"}, {"ConfigMap", "vigil-settings-managed"},
		{"StatefulSet", "vigil-datapath"}, {"Service", "vigil-datapath"},
		{"Deployment", "vigil-csi-controller"}, {"DaemonSet", "vigil-engine-node"},
		{"DaemonSet", "vigil-fd-keeper"}, {"CSIDriver", vigil.DriverName}, {"StorageClass", "vigil"},
		{"ValidatingAdmissionPolicy", "vigil-engine-node-own-node"},
		{"ValidatingAdmissionPolicyBinding", "vigil-engine-node-own-node"},
	} {
		if deploytest.Find(objs, want.kind, want.name) == nil {
			t.Errorf("no %s %s in deploy/base", want.kind, want.name)
		}
	}

	var mgr appsv1.Deployment
	decode(t, objs, "Deployment", "vigil-manager", &mgr)
	if mgr.Spec.Replicas == nil || *mgr.Spec.Replicas != 2 {
		t.Errorf("manager replicas %v, want 2", mgr.Spec.Replicas)
	}
	var dp appsv1.StatefulSet
	decode(t, objs, "StatefulSet", "vigil-datapath", &dp)
	if len(dp.Spec.VolumeClaimTemplates) != 1 || !mountsVolume(dp.Spec.Template.Spec.Containers[0], dp.Spec.VolumeClaimTemplates[0].Name) {
		t.Errorf("the datapath must keep its data on a claim of its volumeClaimTemplates")
	}
	var drv storagev1.CSIDriver
	decode(t, objs, "CSIDriver", vigil.DriverName, &drv)
	if drv.Spec.AttachRequired == nil || !*drv.Spec.AttachRequired || drv.Spec.PodInfoOnMount == nil || !*drv.Spec.PodInfoOnMount {
		t.Errorf("CSIDriver %s needs attachRequired and podInfoOnMount", vigil.DriverName)
	}
	var sc storagev1.StorageClass
	decode(t, objs, "StorageClass", "vigil", &sc)
	if sc.Provisioner != vigil.DriverName {
		t.Errorf("StorageClass vigil: provisioner %q, want %s", sc.Provisioner, vigil.DriverName)
	}
	var ds appsv1.DaemonSet
	decode(t, objs, "DaemonSet", "vigil-engine-node", &ds)
	engine := container(t, ds.Spec.Template.Spec, "engine")
	checkKeeper(t, objs, ds.Spec.Template.Spec, engine)
	if hostPath(ds.Spec.Template.Spec, engine, "/dev/fuse") != "/dev/fuse" {
		t.Errorf("the engine has no /dev/fuse from the host")
	}
	bidi := false
	for _, m := range engine.VolumeMounts {
		if m.MountPath == "/var/lib/kubelet" && m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
			bidi = true
		}
	}
	if !bidi {
		t.Errorf("the engine must mount /var/lib/kubelet with Bidirectional propagation")
	}
	for _, err := range checkRegistration(ds.Spec.Template.Spec) {
		t.Error(err)
	}
	if !slices.ContainsFunc(ds.Spec.Template.Spec.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Operator == corev1.TolerationOpExists && tl.Key == ""
	}) {
		t.Errorf("the engine must tolerate every taint, %s above all (it cleans up the fenced node)", vigil.FencedTaintKey)
	}
}

// TestBase_Build_CRDIsTheEmbeddedOne: deploy/base refers to deploy/crds; the
// CRD applied is the one programs embed, not a copy.
func TestBase_Build_CRDIsTheEmbeddedOne(t *testing.T) {
	objs := build(t, "base")
	b, err := deploy.CRDs.ReadFile("crds/vigil.io_noderecoveries.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	got := deploytest.Find(objs, "CustomResourceDefinition", "noderecoveries.vigil.io")
	if got == nil {
		t.Fatal("no CRD noderecoveries.vigil.io")
	}
	if !reflect.DeepEqual(jsonValue(t, got.Object), jsonValue(t, want)) {
		t.Errorf("the built CRD differs from deploy/crds/vigil.io_noderecoveries.yaml")
	}
	entries, err := deploy.CRDs.ReadDir("crds")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "vigil.io_") {
			t.Errorf("deploy.CRDs embeds %s, which is not a CRD", e.Name())
		}
	}
}

// TestKustomization_Build_ManagedSettingsAreValid: every key of the managed
// settings ConfigMap, in the base and in each overlay, is a setting and its
// value is one the setting accepts, so an install never starts with a refused
// managed value.
func TestKustomization_Build_ManagedSettingsAreValid(t *testing.T) {
	for _, dir := range kustomizations {
		var cm corev1.ConfigMap
		decode(t, build(t, dir), "ConfigMap", "vigil-settings-managed", &cm)
		if err := checkManagedSettings(cm.Data); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
	}
	var cm corev1.ConfigMap
	decode(t, build(t, "overlays/dev"), "ConfigMap", "vigil-settings-managed", &cm)
	if cm.Data["node-down-pod-deletion-policy"] == "" {
		t.Errorf("the dev overlay should show a setting changed through the managed ConfigMap")
	}
}

func TestCheckManagedSettings_BadInput(t *testing.T) {
	for _, tc := range []struct {
		data map[string]string
		want []string
	}{
		{map[string]string{"no-such-setting": "1"}, []string{"no-such-setting"}},
		{map[string]string{"fast-fenced-trigger": "maybe"}, []string{"fast-fenced-trigger", "maybe"}},
		{map[string]string{"node-down-grace-period": "-3s"}, []string{"node-down-grace-period", "-3s"}},
	} {
		err := checkManagedSettings(tc.data)
		if err == nil {
			t.Errorf("%v: accepted", tc.data)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not name %q", tc.data, err, w)
			}
		}
	}
	if err := checkManagedSettings(map[string]string{"dry-run": "true"}); err != nil {
		t.Errorf("a good value refused: %v", err)
	}
}

func checkManagedSettings(data map[string]string) error {
	for k, v := range data {
		if _, err := settings.ParseValue(k, v); err != nil {
			return err
		}
	}
	return nil
}

// TestOverlayDev_Build_ChangesOnlyWhatItSays: the dev overlay is the base with
// its settings and image; nothing else moves.
func TestOverlayDev_Build_ChangesOnlyWhatItSays(t *testing.T) {
	base, dev := build(t, "base"), build(t, "overlays/dev")
	if len(base) != len(dev) {
		t.Fatalf("base has %d objects, dev %d", len(base), len(dev))
	}
	for i := range base {
		if base[i].GetKind() != dev[i].GetKind() || base[i].GetName() != dev[i].GetName() {
			t.Errorf("object %d: base %s/%s, dev %s/%s", i, base[i].GetKind(), base[i].GetName(), dev[i].GetKind(), dev[i].GetName())
		}
	}
}

func decode(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	o := deploytest.Find(objs, kind, name)
	if o == nil {
		t.Fatalf("no %s %s", kind, name)
	}
	if err := deploytest.Decode(o, out); err != nil {
		t.Fatal(err)
	}
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

func mountsVolume(c corev1.Container, volume string) bool {
	return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume })
}

// hostPath resolves path inside container c to where it lives: the host path
// for a hostPath volume, "VOLUME-KIND:NAME/rest" for others, "" if unmounted.
func hostPath(spec corev1.PodSpec, c corev1.Container, path string) string {
	best := mountOf(c, path)
	if best.Name == "" {
		return ""
	}
	rest := strings.TrimPrefix(path, best.MountPath)
	for _, v := range spec.Volumes {
		if v.Name != best.Name {
			continue
		}
		switch {
		case v.HostPath != nil:
			return strings.TrimSuffix(v.HostPath.Path, "/") + rest
		case v.EmptyDir != nil:
			return "emptyDir:" + v.Name + rest
		case v.Projected != nil:
			return "projected:" + v.Name + rest
		case v.ConfigMap != nil:
			return "configMap:" + v.ConfigMap.Name + rest
		case v.Secret != nil:
			return "secret:" + v.Secret.SecretName + rest
		}
		return "volume:" + v.Name + rest
	}
	return ""
}

// mountOf is the mount of c that holds path (the deepest), or none.
func mountOf(c corev1.Container, path string) corev1.VolumeMount {
	best := corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		if (path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")) && len(m.MountPath) > len(best.MountPath) {
			best = m
		}
	}
	return best
}

func TestHostPath_Resolve(t *testing.T) {
	spec := corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "k", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/kubelet"}}},
		{Name: "p", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/kubelet/plugins/x"}}},
		{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}}
	c := corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "k", MountPath: "/kube"}, {Name: "p", MountPath: "/csi"}, {Name: "e", MountPath: "/tmp"}}}
	for path, want := range map[string]string{
		"/kube/plugins/x/csi.sock": "/var/lib/kubelet/plugins/x/csi.sock",
		"/csi/csi.sock":            "/var/lib/kubelet/plugins/x/csi.sock",
		"/tmp/a":                   "emptyDir:e/a",
		"/csix/a":                  "",
		"/etc/passwd":              "",
	} {
		if got := hostPath(spec, c, path); got != want {
			t.Errorf("hostPath(%s) = %q, want %q", path, got, want)
		}
	}
}

// readFile reads a file of the repository, relative to its root.
func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(deploytest.Dir()), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// jsonValue is v after a JSON round trip, so that numbers compare alike.
func jsonValue(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkKeeper: the fd keeper is never rolled (OnDelete: stopping it ends every
// FUSE connection it holds), and the engine's --fd-keeper-socket is the
// keeper's --socket, on the same host directory.
func checkKeeper(t *testing.T, objs []*unstructured.Unstructured, engineSpec corev1.PodSpec, engine corev1.Container) {
	t.Helper()
	var ks appsv1.DaemonSet
	decode(t, objs, "DaemonSet", "vigil-fd-keeper", &ks)
	if ks.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
		t.Errorf("the fd keeper's updateStrategy is %q, want OnDelete", ks.Spec.UpdateStrategy.Type)
	}
	keeper := container(t, ks.Spec.Template.Spec, "fd-keeper")
	arg := func(c corev1.Container, flag string) string {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				return v
			}
		}
		return ""
	}
	sock, esock := arg(keeper, "--socket"), arg(engine, "--fd-keeper-socket")
	if sock == "" || sock != esock {
		t.Fatalf("the keeper serves --socket=%q, the engine asks --fd-keeper-socket=%q: want one path", sock, esock)
	}
	kh, eh := hostPath(ks.Spec.Template.Spec, keeper, sock), hostPath(engineSpec, engine, esock)
	if kh == "" || kh != eh {
		t.Errorf("the keeper's socket is %q on the host, the engine's %q: want one host path", kh, eh)
	}
}
