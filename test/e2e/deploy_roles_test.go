package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	vigil "github.com/vigil-storage/vigil"
	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/deploy/deploytest"
	"github.com/vigil-storage/vigil/sandbox"
)

// outcome is what a call under a component's identity must get.
type outcome int

const (
	allowed         outcome = iota // authorized (a dry run succeeds, or the object is not found)
	rbacDenied                     // refused by RBAC: the role does not allow it
	admissionDenied                // authorized, refused by admission (the engine's policy, NodeRestriction)
)

// roleCall is one call under one identity and what it must get.
type roleCall struct {
	who, what string
	want      outcome
	refusal   string             // admissionDenied: a part of the refusal's message
	req       deploytest.Request // what RBAC sees; Verb "" for a node's identity (no role of deploy/)
	call      func() error
}

// identities are the clients of each identity the role test uses.
type identities struct {
	admin, manager, csi, engine, datapath, kubelet kubernetes.Interface
	recoveries                                     *v1alpha1.Client // the manager's
}

// checkRolesWithTokens applies the ServiceAccounts, roles and the engine's
// admission policy that kustomize built for real, then the sandbox's
// identities (ApplyDeployRBAC: the same objects and the kubelet stand-ins'
// role), and makes calls inside and outside each role under the identities the
// sandbox gives the components (ComponentKubeconfig: TokenRequest tokens, the
// engine's bound to Node node-1; NodeKubeconfig: node-1's kubelet identity).
// Mutations are dry runs, which RBAC and admission judge as real ones. Each
// call of a ServiceAccount must be in the audit log with the verdict that
// deploytest.Allows gives from the manifests.
func checkRolesWithTokens(ctx context.Context, t *testing.T, s *sandbox.Sandbox, a *applier, objs []*unstructured.Unstructured) {
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			a.apply(ctx, t, o, false)
		}
	}
	must(t, s.ApplyDeployRBAC(ctx))
	grants, err := deploytest.Grants(objs)
	must(t, err)
	// node-1 carries the fenced taint, so that the engine has something to remove.
	patch := fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"effect":"NoSchedule"}]}}`, vigil.FencedTaintKey)
	_, err = s.Client().CoreV1().Nodes().Patch(ctx, "node-1", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err)
	ids := newIdentities(ctx, t, s)
	calls := append(append(managerCalls(ctx, t, ids), csiAndDatapathCalls(ctx, ids)...), engineAndKubeletCalls(ctx, t, ids)...)
	// The API server loads a new admission policy asynchronously: wait until
	// it refuses what it must refuse, then judge every call.
	policy := findCall(t, calls, "vigil-engine-node", "change another node's taints")
	err = sandbox.Poll(ctx, 30*time.Second, "admission policy vigil-engine-node-own-node in force", func(context.Context) (bool, string, error) {
		err := policy.call()
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), fmt.Sprint(err), nil
	}, func(context.Context) string { return "" })
	must(t, err)
	sas := 0
	for _, c := range calls {
		judgeCall(t, c, c.call())
		if c.req.Verb == "" {
			continue
		}
		sas++
		if rbac := deploytest.Allows(grants[vigil.Namespace+"/"+c.who], c.req); rbac != (c.want != rbacDenied) {
			t.Errorf("%s: %s: the manifests' roles allow %s: %v, but the call is expected %v", c.who, c.what, c.req, rbac, c.want)
		}
	}
	checkAudit(t, s, grants, sas)
}

func judgeCall(t *testing.T, c roleCall, err error) {
	t.Helper()
	switch {
	case c.want == allowed && err != nil && !apierrors.IsNotFound(err):
		t.Errorf("%s: %s: %v, want allowed", c.who, c.what, err)
	case c.want != allowed && !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
		t.Errorf("%s: %s: %v, want refused", c.who, c.what, err)
	case c.want == admissionDenied && !strings.Contains(fmt.Sprint(err), c.refusal):
		t.Errorf("%s: %s: %v, want a refusal by admission saying %q", c.who, c.what, err, c.refusal)
	case c.want == rbacDenied && !strings.Contains(fmt.Sprint(err), "cannot"):
		t.Errorf("%s: %s: %v, want RBAC's refusal (\"... cannot ...\")", c.who, c.what, err)
	}
}

func findCall(t *testing.T, calls []roleCall, who, what string) roleCall {
	t.Helper()
	for _, c := range calls {
		if c.who == who && c.what == what {
			return c
		}
	}
	t.Fatalf("no call %s: %s", who, what)
	return roleCall{}
}

func newIdentities(ctx context.Context, t *testing.T, s *sandbox.Sandbox) identities {
	t.Helper()
	client := func(path string, err error) kubernetes.Interface {
		t.Helper()
		must(t, err)
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		must(t, err)
		c, err := kubernetes.NewForConfig(cfg)
		must(t, err)
		return c
	}
	ids := identities{admin: s.Client()}
	mgr, err := s.ComponentKubeconfig(ctx, vigil.ManagerServiceAccount, "")
	ids.manager = client(mgr, err)
	cfg, err := clientcmd.BuildConfigFromFlags("", mgr)
	must(t, err)
	ids.recoveries, err = v1alpha1.NewForConfig(cfg)
	must(t, err)
	ids.csi = client(s.ComponentKubeconfig(ctx, vigil.CSIControllerServiceAccount, ""))
	ids.engine = client(s.ComponentKubeconfig(ctx, vigil.EngineServiceAccount, "node-1"))
	ids.datapath = client(s.ComponentKubeconfig(ctx, vigil.DatapathServiceAccount, ""))
	ids.kubelet = client(s.NodeKubeconfig("node-1"))
	return ids
}

var (
	dryCreate = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	dryUpdate = metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	dryPatch  = metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	dryDelete = metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
)

func req(verb, group, res, ns, name string) deploytest.Request {
	return deploytest.Request{Verb: verb, Group: group, Resource: res, Namespace: ns, Name: name}
}

// managerCalls: what the closed loop does (the informers, the taint, the
// status patch of volumesInUse, deletes of attachments and pods, the
// recovery records, the Lease) and what it must not.
func managerCalls(ctx context.Context, t *testing.T, ids identities) []roleCall {
	m, nr := ids.manager, ids.recoveries
	const who = "vigil-manager"
	taint := fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"effect":"NoSchedule"}]}}`, vigil.FencedTaintKey)
	rec := &v1alpha1.NodeRecovery{ObjectMeta: metav1.ObjectMeta{Name: "node-1-roles"}, Spec: v1alpha1.NodeRecoverySpec{NodeName: "node-1"}}
	lease := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: vigil.ManagerLeaseName, Namespace: vigil.Namespace}}
	other := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: vigil.Namespace}}
	managed := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vigil-settings-managed", Namespace: vigil.Namespace}}
	return []roleCall{
		{who, "list pods", allowed, "", req("list", "", "pods", "", ""),
			func() error { _, err := m.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err }},
		{who, "get node-1", allowed, "", req("get", "", "nodes", "", "node-1"),
			func() error { _, err := m.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{}); return err }},
		{who, "taint node-1 (fence)", allowed, "", req("patch", "", "nodes", "", "node-1"),
			func() error {
				_, err := m.CoreV1().Nodes().Patch(ctx, "node-1", types.StrategicMergePatchType, []byte(taint), dryPatch)
				return err
			}},
		{who, "patch node-1's status (volumesInUse)", allowed, "", req("patch", "", "nodes/status", "", "node-1"),
			func() error {
				_, err := m.CoreV1().Nodes().Patch(ctx, "node-1", types.MergePatchType, []byte(`{"status":{"volumesInUse":null}}`), dryPatch, "status")
				return err
			}},
		{who, "delete a VolumeAttachment", allowed, "", req("delete", "storage.k8s.io", "volumeattachments", "", "csi-roles"),
			func() error { return m.StorageV1().VolumeAttachments().Delete(ctx, "csi-roles", dryDelete) }},
		{who, "force-delete a pod", allowed, "", req("delete", "", "pods", "default", "web-0"),
			func() error { return m.CoreV1().Pods("default").Delete(ctx, "web-0", dryDelete) }},
		{who, "create a NodeRecovery", allowed, "", req("create", "vigil.io", "noderecoveries", "", ""),
			func() error { _, err := nr.Create(ctx, rec, dryCreate); return err }},
		{who, "update a NodeRecovery's status", allowed, "", req("update", "vigil.io", "noderecoveries/status", "", rec.Name),
			func() error { _, err := nr.UpdateStatus(ctx, rec, dryUpdate); return err }},
		{who, "get its Lease", allowed, "", req("get", "coordination.k8s.io", "leases", vigil.Namespace, vigil.ManagerLeaseName),
			func() error {
				_, err := m.CoordinationV1().Leases(vigil.Namespace).Get(ctx, vigil.ManagerLeaseName, metav1.GetOptions{})
				return err
			}},
		{who, "create its Lease", allowed, "", req("create", "coordination.k8s.io", "leases", vigil.Namespace, ""),
			func() error {
				_, err := m.CoordinationV1().Leases(vigil.Namespace).Create(ctx, lease, dryCreate)
				return err
			}},
		{who, "update another Lease", rbacDenied, "", req("update", "coordination.k8s.io", "leases", vigil.Namespace, "other"),
			func() error {
				_, err := m.CoordinationV1().Leases(vigil.Namespace).Update(ctx, other, dryUpdate)
				return err
			}},
		{who, "list the node Leases", allowed, "", req("list", "coordination.k8s.io", "leases", corev1.NamespaceNodeLease, ""),
			func() error {
				_, err := m.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
				return err
			}},
		{who, "update a node's Lease", rbacDenied, "", req("update", "coordination.k8s.io", "leases", corev1.NamespaceNodeLease, "node-1"),
			func() error {
				nl := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Namespace: corev1.NamespaceNodeLease}}
				_, err := m.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, nl, dryUpdate)
				return err
			}},
		{who, "delete a Secret", rbacDenied, "", req("delete", "", "secrets", "default", "x"),
			func() error { return m.CoreV1().Secrets("default").Delete(ctx, "x", dryDelete) }},
		{who, "patch a Deployment", rbacDenied, "", req("patch", "apps", "deployments", "default", "web"),
			func() error {
				_, err := m.AppsV1().Deployments("default").Patch(ctx, "web", types.MergePatchType, []byte(`{}`), dryPatch)
				return err
			}},
		{who, "delete a Node", rbacDenied, "", req("delete", "", "nodes", "", "node-2"),
			func() error { return m.CoreV1().Nodes().Delete(ctx, "node-2", dryDelete) }},
		{who, "create a pod", rbacDenied, "", req("create", "", "pods", "default", ""),
			func() error { _, err := m.CoreV1().Pods("default").Create(ctx, testPod(), dryCreate); return err }},
		{who, "change the managed settings", rbacDenied, "", req("update", "", "configmaps", vigil.Namespace, managed.Name),
			func() error {
				_, err := m.CoreV1().ConfigMaps(vigil.Namespace).Update(ctx, managed, dryUpdate)
				return err
			}},
		{who, "delete a PersistentVolume", rbacDenied, "", req("delete", "", "persistentvolumes", "", "pv-1"),
			func() error { return m.CoreV1().PersistentVolumes().Delete(ctx, "pv-1", dryDelete) }},
	}
}

// csiAndDatapathCalls: provisioning and attaching, nothing of the reaper;
// the datapath's TokenReview and nothing else.
func csiAndDatapathCalls(ctx context.Context, ids identities) []roleCall {
	c, d := ids.csi, ids.datapath
	const who = "vigil-csi-controller"
	return []roleCall{
		{who, "create a PersistentVolume", allowed, "", req("create", "", "persistentvolumes", "", ""),
			func() error { _, err := c.CoreV1().PersistentVolumes().Create(ctx, testPV(), dryCreate); return err }},
		{who, "report an attachment (VolumeAttachment status)", allowed, "", req("patch", "storage.k8s.io", "volumeattachments/status", "", "csi-roles"),
			func() error {
				_, err := c.StorageV1().VolumeAttachments().Patch(ctx, "csi-roles", types.MergePatchType, []byte(`{"status":{"attached":true}}`), dryPatch, "status")
				return err
			}},
		{who, "force-delete a pod", rbacDenied, "", req("delete", "", "pods", "default", "web-0"),
			func() error { return c.CoreV1().Pods("default").Delete(ctx, "web-0", dryDelete) }},
		{who, "delete a VolumeAttachment", rbacDenied, "", req("delete", "storage.k8s.io", "volumeattachments", "", "csi-roles"),
			func() error { return c.StorageV1().VolumeAttachments().Delete(ctx, "csi-roles", dryDelete) }},
		{who, "patch node status", rbacDenied, "", req("patch", "", "nodes/status", "", "node-1"),
			func() error {
				_, err := c.CoreV1().Nodes().Patch(ctx, "node-1", types.MergePatchType, []byte(`{}`), dryPatch, "status")
				return err
			}},
		{"vigil-datapath", "review a token", allowed, "", req("create", "authentication.k8s.io", "tokenreviews", "", ""),
			func() error {
				_, err := d.AuthenticationV1().TokenReviews().Create(ctx, &authv1.TokenReview{Spec: authv1.TokenReviewSpec{Token: "not-a-token"}}, metav1.CreateOptions{})
				return err
			}},
		{"vigil-datapath", "list pods", rbacDenied, "", req("list", "", "pods", "", ""),
			func() error { _, err := d.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err }},
	}
}

// engineAndKubeletCalls: the engine removes the fenced taint from its own
// Node and nothing else (RBAC and the admission policy); node-1's kubelet
// identity writes its own Node's status only (NodeRestriction).
func engineAndKubeletCalls(ctx context.Context, t *testing.T, ids identities) []roleCall {
	e, k, admin := ids.engine, ids.kubelet, ids.admin
	const who = "vigil-engine-node"
	node := func(name string, change func(*corev1.Node)) *corev1.Node {
		n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		n.Spec.Taints = nil
		change(n)
		return n
	}
	const kubelet = "system:node:node-1"
	const restriction = `node "node-1" is not allowed to modify node "node-2"`
	volumes := []byte(`{"status":{"volumesInUse":null}}`)
	return []roleCall{
		{who, "remove vigil.io/fenced from its own node", allowed, "", req("update", "", "nodes", "", "node-1"),
			func() error {
				_, err := e.CoreV1().Nodes().Update(ctx, node("node-1", func(*corev1.Node) {}), dryUpdate)
				return err
			}},
		{who, "list the pods of its node", allowed, "", req("list", "", "pods", "", ""),
			func() error {
				_, err := e.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-1"})
				return err
			}},
		{who, "change another node's taints", admissionDenied, "vigil-engine-node-own-node", req("update", "", "nodes", "", "node-2"),
			func() error {
				n := node("node-2", func(n *corev1.Node) {
					n.Spec.Taints = []corev1.Taint{{Key: vigil.FencedTaintKey, Effect: corev1.TaintEffectNoSchedule}}
				})
				_, err := e.CoreV1().Nodes().Update(ctx, n, dryUpdate)
				return err
			}},
		{who, "label its own node", admissionDenied, "vigil-engine-node-own-node", req("update", "", "nodes", "", "node-1"),
			func() error {
				n := node("node-1", func(n *corev1.Node) { n.Labels["vigil.io/stolen"] = "yes" })
				_, err := e.CoreV1().Nodes().Update(ctx, n, dryUpdate)
				return err
			}},
		{who, "patch its own node", rbacDenied, "", req("patch", "", "nodes", "", "node-1"),
			func() error {
				_, err := e.CoreV1().Nodes().Patch(ctx, "node-1", types.MergePatchType, []byte(`{}`), dryPatch)
				return err
			}},
		{who, "delete a pod", rbacDenied, "", req("delete", "", "pods", "default", "web-0"),
			func() error { return e.CoreV1().Pods("default").Delete(ctx, "web-0", dryDelete) }},
		{who, "patch node status", rbacDenied, "", req("patch", "", "nodes/status", "", "node-1"),
			func() error {
				_, err := e.CoreV1().Nodes().Patch(ctx, "node-1", types.MergePatchType, []byte(`{}`), dryPatch, "status")
				return err
			}},
		{who, "read a Secret", rbacDenied, "", req("get", "", "secrets", vigil.Namespace, "x"),
			func() error {
				_, err := e.CoreV1().Secrets(vigil.Namespace).Get(ctx, "x", metav1.GetOptions{})
				return err
			}},
		{kubelet, "report its volumes in use", allowed, "", deploytest.Request{},
			func() error {
				_, err := k.CoreV1().Nodes().Patch(ctx, "node-1", types.MergePatchType, volumes, dryPatch, "status")
				return err
			}},
		{kubelet, "watch claims (the stand-in's informer)", allowed, "", deploytest.Request{},
			func() error {
				_, err := k.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
				return err
			}},
		{kubelet, "write another node's status", admissionDenied, restriction, deploytest.Request{},
			func() error {
				_, err := k.CoreV1().Nodes().Patch(ctx, "node-2", types.MergePatchType, volumes, dryPatch, "status")
				return err
			}},
		{kubelet, "delete a VolumeAttachment", rbacDenied, "", deploytest.Request{},
			func() error { return k.StorageV1().VolumeAttachments().Delete(ctx, "csi-roles", dryDelete) }},
		{kubelet, "list Secrets", rbacDenied, "", deploytest.Request{},
			func() error { _, err := k.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); return err }},
	}
}

func testPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "roles", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: sandbox.PauseImage}}}}
}

func testPV() *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-roles"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: vigil.DriverName, VolumeHandle: "roles"}},
		}}
}

// checkAudit maps every recorded request of Vigil's identities to the roles of
// the manifests: the authorizer allowed it exactly when the roles allow it (a
// request it allowed may still be refused by admission).
func checkAudit(t *testing.T, s *sandbox.Sandbox, grants map[string][]deploytest.Grant, calls int) {
	evs, err := s.AuditEvents()
	must(t, err)
	n := 0
	for _, c := range auditCalls(evs) {
		if c.Resource == "" {
			continue // discovery
		}
		n++
		if roles := deploytest.Allows(grants[c.ServiceAccount], c.Request); roles != c.Authorized {
			t.Errorf("audit: %s: authorized %v (%s), but the roles of deploy/ allow it: %v", c, c.Authorized, c.Reason, roles)
		}
	}
	for _, e := range evs {
		if e.User == "system:serviceaccount:vigil-system:vigil-engine-node" {
			if nn := e.Extra[vigil.NodeNameTokenExtra]; len(nn) != 1 || nn[0] != "node-1" {
				t.Errorf("audit: the engine's token carries node %v, want node-1", nn)
			}
		}
	}
	t.Logf("audit: %d requests of Vigil's identities, each mapped to the roles of deploy/", n)
	if n < calls {
		t.Errorf("the audit log holds %d requests of Vigil's identities, want at least the %d made", n, calls)
	}
}
