package e2e

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/sandbox"
)

// What the uninstall procedure of docs/operations.md (Uninstalling) removes
// from each Node and from each node's disk after `kubectl delete -k
// deploy/`. Anything else of Vigil found there afterwards fails the test:
// then the docs are missing a step.
var (
	// uninstallNodeLabels: the kubelet labels a Node with the topology key
	// of each CSI driver it registers, and keeps the label when the driver
	// goes.
	uninstallNodeLabels = []string{vigil.TopologyNodeKey}
	// uninstallNodeTaints: the manager's fenced taint, when an engine never
	// came back to remove it.
	uninstallNodeTaints = []string{vigil.FencedTaintKey}
	// uninstallNodePaths: the engine's state directory (its journal, the fd
	// keeper's socket, a FUSE disk's directory), the directory of its CSI
	// socket, the kubelet's staging directory of the driver (empty
	// directories once every volume is unstaged); in the sandbox also the
	// datapath's local volume on node-1 (/var/lib/vigil/datapath,
	// overlays/sandbox).
	uninstallNodePaths = []string{"/var/lib/vigil", sandbox.MachineKubeletRoot + "/plugins/" + vigil.DriverName,
		kubeletStagingDir}
	kubeletStagingDir = sandbox.MachineKubeletRoot + "/plugins/kubernetes.io/csi/" + vigil.DriverName
)

// installedUninstall is the uninstall procedure of docs/operations.md run on
// the installed sandbox: the workloads and their claims first, waiting until
// their PersistentVolumes and VolumeAttachments are gone (the datapath then
// holds no volume); then `kubectl delete -k deploy/` (Sandbox.Uninstall);
// then what the docs say stays on the Nodes and on the nodes' disks is
// removed. Nothing of Vigil may be left: no object of the API labelled
// app.kubernetes.io/part-of=vigil or named after it, no CSIDriver, CRD or
// StorageClass of it, no Vigil key in any Node's labels, annotations or
// taints, the driver in no CSINode; on each node no mount, loop device or
// file of Vigil's.
func installedUninstall(t *testing.T, ctx context.Context, s *sandbox.Sandbox, dp *client.Client) {
	t.Helper()
	c := s.Client()
	t0 := time.Now()
	deleteClaimsFirst(t, ctx, s, dp)
	claims := time.Since(t0)
	res, err := s.Uninstall(ctx, sandbox.InstallConfig{Timeout: 3 * time.Minute, Progressf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	// The engines' registration sockets are gone with their pods: the
	// kubelets forget the driver (its CSINode entry and node-ID annotation).
	must(t, sandbox.Poll(ctx, time.Minute, "the driver in no CSINode", func(ctx context.Context) (bool, string, error) {
		list, err := c.StorageV1().CSINodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		var with []string
		for _, n := range list.Items {
			for _, d := range n.Spec.Drivers {
				if d.Name == vigil.DriverName {
					with = append(with, n.Name)
				}
			}
		}
		return len(with) == 0, fmt.Sprintf("still registered on %v", with), nil
	}, nil))
	deregistered := time.Since(t0)
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, n := range nodes.Items {
		t.Logf("after delete -k, %s: Vigil's keys %v; on its disk %v", n.Name, vigilKeysOf(&n), vigilFilesOf(t, s, n.Name))
		checkNodeDisk(t, s, n.Name)
	}
	cleanNodes(t, ctx, s)
	for _, n := range nodes.Items {
		if left := vigilFilesOf(t, s, n.Name); len(left) > 0 {
			t.Errorf("left on %s's disk after the documented removal: %v", n.Name, left)
		}
	}
	nodes, err = c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, n := range nodes.Items {
		if left := vigilKeysOf(&n); len(left) > 0 {
			t.Errorf("left on Node %s after the documented removal: %v", n.Name, left)
		}
	}
	checkNothingInAPI(t, ctx, s)
	t.Logf("figures: uninstall %.1fs: claims and volumes gone %.1fs, delete -k of %d objects and all gone %.1fs (deletes %.1fs), driver deregistered from every CSINode %.1fs after the start",
		time.Since(t0).Seconds(), claims.Seconds(), res.Objects, res.Took.Seconds(), res.Deleted.Seconds(), deregistered.Seconds())
}

// deleteClaimsFirst deletes the StatefulSets and claims of namespace
// default and waits until no PersistentVolume of the driver, no
// VolumeAttachment of it and no volume at the datapath is left.
func deleteClaimsFirst(t *testing.T, ctx context.Context, s *sandbox.Sandbox, dp *client.Client) {
	t.Helper()
	c := s.Client()
	bg := metav1.DeletePropagationBackground
	must(t, c.AppsV1().StatefulSets("default").DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{}))
	must(t, c.CoreV1().PersistentVolumeClaims("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
	must(t, sandbox.Poll(ctx, 2*time.Minute, "no pod, PersistentVolume, VolumeAttachment or datapath volume of "+vigil.DriverName,
		func(ctx context.Context) (bool, string, error) {
			pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			pvs, err := c.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			vas, err := c.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			vols, err := dp.ListVolumes(ctx)
			if err != nil {
				return false, err.Error(), nil
			}
			var left []string
			for _, p := range pods.Items {
				left = append(left, "pod "+p.Name)
			}
			for _, pv := range pvs.Items {
				if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == vigil.DriverName {
					left = append(left, "PersistentVolume "+pv.Name+" "+string(pv.Status.Phase))
				}
			}
			for _, va := range vas.Items {
				if va.Spec.Attacher == vigil.DriverName {
					left = append(left, "VolumeAttachment "+va.Name)
				}
			}
			for _, v := range vols {
				left = append(left, "datapath volume "+v.ID)
			}
			return len(left) == 0, strings.Join(left, ", "), nil
		}, func(ctx context.Context) string {
			return sandbox.DescribePVCs(ctx, c, "default") + sandbox.DescribePods(ctx, c, vigil.Namespace, "")
		}))
}

// vigilKeysOf lists the taints, labels and annotations of n whose key (or,
// for an annotation, value) names Vigil.
func vigilKeysOf(n *corev1.Node) []string {
	var out []string
	for _, tt := range n.Spec.Taints {
		if strings.Contains(tt.Key, "vigil.io") {
			out = append(out, "taint "+tt.Key)
		}
	}
	for k := range n.Labels {
		if strings.Contains(k, "vigil.io") && k != vigil.NodeLabel { // the sandbox's own label of its nodes
			out = append(out, "label "+k)
		}
	}
	for k, v := range n.Annotations {
		if strings.Contains(k, "vigil.io") || strings.Contains(v, vigil.DriverName) {
			out = append(out, "annotation "+k+"="+v)
		}
	}
	slices.Sort(out)
	return out
}

// vigilFilesOf lists the files and directories under node's own /var/lib
// whose name names Vigil, as the node sees them.
func vigilFilesOf(t *testing.T, s *sandbox.Sandbox, node string) []string {
	t.Helper()
	root, err := s.MachineDir(node, "/var/lib")
	must(t, err)
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone meanwhile, or unreadable: not ours to judge here
		}
		if strings.Contains(d.Name(), "vigil") {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.Join("/var/lib", rel))
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	return out
}

// checkNodeDisk: on node, after delete -k, nothing of Vigil's is mounted
// or backs a loop device, the kubelet's staging directory of the driver
// holds no file, and the engine removed its registration socket.
func checkNodeDisk(t *testing.T, s *sandbox.Sandbox, node string) {
	t.Helper()
	for _, p := range uninstallNodePaths {
		dir, err := s.MachineDir(node, p)
		must(t, err)
		if m := mountsUnder(t, dir); len(m) > 0 {
			t.Errorf("%s: still mounted under %s: %v", node, p, m)
		}
		if l := loopsUnder(t, dir); len(l) > 0 {
			t.Errorf("%s: loop devices still backed under %s: %v", node, p, l)
		}
	}
	staging, err := s.MachineDir(node, kubeletStagingDir)
	must(t, err)
	_ = filepath.WalkDir(staging, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("%s: the kubelet's staging directory holds %s: a volume not unstaged", node, p)
		}
		return nil
	})
	reg := filepath.Join(s.KubeletRoot(node), "plugins_registry", vigil.DriverName+"-reg.sock")
	if _, err := os.Stat(reg); err == nil {
		t.Errorf("%s: the engine's registration socket %s is still there", node, reg)
	}
}

// cleanNodes is the last step of the procedure: the documented labels and
// taints off every Node (`kubectl label nodes --all KEY-`, `kubectl taint
// nodes --all KEY-`), the documented paths off every node's disk (`rm -rf`).
func cleanNodes(t *testing.T, ctx context.Context, s *sandbox.Sandbox) {
	t.Helper()
	c := s.Client()
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, n := range nodes.Items {
		for _, p := range uninstallNodePaths {
			dir, err := s.MachineDir(n.Name, p)
			must(t, err)
			must(t, os.RemoveAll(dir))
		}
		for try := 0; ; try++ {
			node, err := c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			must(t, err)
			for _, k := range uninstallNodeLabels {
				delete(node.Labels, k)
			}
			node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(tt corev1.Taint) bool { return slices.Contains(uninstallNodeTaints, tt.Key) })
			_, err = c.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
			if err == nil {
				break
			}
			if !apierrors.IsConflict(err) || try == 5 {
				t.Fatalf("remove Vigil's labels and taints from %s: %v", n.Name, err)
			}
		}
	}
}

// checkNothingInAPI: no object of any resource the API server lists is
// labelled app.kubernetes.io/part-of=vigil or named after Vigil, no
// namespace vigil-system, no CSIDriver, no CRD or StorageClass of Vigil's.
func checkNothingInAPI(t *testing.T, ctx context.Context, s *sandbox.Sandbox) {
	t.Helper()
	c := s.Client()
	if _, err := c.CoreV1().Namespaces().Get(ctx, vigil.Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s: %v, want NotFound", vigil.Namespace, err)
	}
	if _, err := c.StorageV1().CSIDrivers().Get(ctx, vigil.DriverName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("CSIDriver %s: %v, want NotFound", vigil.DriverName, err)
	}
	scs, err := c.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, sc := range scs.Items {
		if sc.Provisioner == vigil.DriverName {
			t.Errorf("StorageClass %s of %s left", sc.Name, vigil.DriverName)
		}
	}
	lists, err := discovery.NewDiscoveryClientForConfigOrDie(s.RESTConfig()).ServerPreferredResources()
	must(t, err)
	dc, err := dynamic.NewForConfig(s.RESTConfig())
	must(t, err)
	n, found := 0, 0
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		must(t, err)
		if strings.HasSuffix(gv.Group, "vigil.io") {
			t.Errorf("the API still serves %s (a CRD of Vigil's)", l.GroupVersion)
		}
		for _, r := range l.APIResources {
			if !slices.Contains(r.Verbs, "list") || strings.Contains(r.Name, "/") {
				continue
			}
			n++
			items, err := dc.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Errorf("list %s: %v", r.Name, err)
				continue
			}
			for _, o := range items.Items {
				if o.GetLabels()["app.kubernetes.io/name"] == sandbox.OwnObjectsName {
					continue // the sandbox's own (its kwok role), not the install's
				}
				if o.GetLabels()["app.kubernetes.io/part-of"] == "vigil" || strings.Contains(o.GetName(), "vigil") {
					if r.Kind == "Event" {
						// A record about an object, by Vigil or by a Kubernetes
						// controller: the API server removes it after its
						// --event-ttl, as Uninstalling says.
						t.Logf("an Event left, to expire: %s", eventSummary(o.Object))
						continue
					}
					found++
					t.Errorf("left in the API: %s %s/%s (labels %v)", r.Kind, o.GetNamespace(), o.GetName(), o.GetLabels())
				}
			}
		}
	}
	t.Logf("uninstall: %d resources listed, %d objects of Vigil's in them", n, found)
}

// eventSummary says what an Event (core/v1 or events.k8s.io/v1) is about, who
// recorded it and why.
func eventSummary(ev map[string]any) string {
	str := func(path ...string) string {
		v, _, _ := unstructured.NestedString(ev, path...)
		return v
	}
	about := "involvedObject"
	if _, ok := ev["regarding"]; ok {
		about = "regarding"
	}
	by := cmp.Or(str("source", "component"), str("reportingController"))
	return fmt.Sprintf("%s/%s about %s %s/%s, by %q: %s %s: %q", str("metadata", "namespace"), str("metadata", "name"),
		str(about, "kind"), str(about, "namespace"), str(about, "name"), by, str("type"), str("reason"), cmp.Or(str("message"), str("note")))
}
