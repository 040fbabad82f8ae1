package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/deploy/deploytest"
	"github.com/vigil-storage/vigil/internal/testenv"
	"github.com/vigil-storage/vigil/sandbox"
)

// The deploy test runs a sandbox of its own, with the API server's audit log
// on: it installs deploy/'s cluster-wide objects (CSIDriver, StorageClass,
// RBAC), which would change what the shared sandbox's tests see.
const (
	deployName   = "e2e-deploy"
	deploySubnet = "10.213.170.0/24"
	fieldManager = "vigil-e2e"
)

// TestDeploy_ApplyServerDryRun is issue 12's `kubectl apply --dry-run=server
// -k deploy/`, done in Go: kustomize builds deploy/, the namespace and the CRDs
// are applied for real, every other object with a server-side dry run (the
// API server validates, defaults and admits each one, CEL of the admission
// policy included, and stores nothing). Then `kubectl get noderecoveries`'s
// columns are read from the API server (the Table kubectl prints), and the
// roles are tried with real ServiceAccount tokens, each call checked against
// the API server's audit log.
func TestDeploy_ApplyServerDryRun(t *testing.T) {
	s := deploySandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	objs, err := deploytest.Build(deploytest.Dir())
	if err != nil {
		t.Fatal(err)
	}
	a := newApplier(t, s.RESTConfig())
	var rest []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Namespace" || o.GetKind() == "CustomResourceDefinition" {
			a.apply(ctx, t, o, false)
		} else {
			rest = append(rest, o)
		}
	}
	waitCRDsEstablished(ctx, t, a, objs)
	a.mapper.Reset()
	for _, o := range rest {
		a.apply(ctx, t, o, true)
	}
	if t.Failed() {
		return
	}
	// Nothing of the dry run was stored.
	if _, err := s.Client().AppsV1().Deployments(vigil.Namespace).Get(ctx, "vigil-manager", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after a dry run, the manager Deployment: %v, want NotFound", err)
	}
	t.Run("NodeRecoveryColumns", func(t *testing.T) { checkNodeRecoveryColumns(ctx, t, s, a) })
	t.Run("RolesWithRealTokens", func(t *testing.T) { checkRolesWithTokens(ctx, t, s, a, objs) })
}

func deploySandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	workDir := filepath.Join(os.TempDir(), "vigil-"+deployName)
	if err := sandbox.DownWorkDir(workDir); err != nil {
		t.Fatalf("leftover sandbox in %s: %v", workDir, err)
	}
	return sandbox.UpForTest(t, sandbox.Config{Name: deployName, WorkDir: workDir, Nodes: 2,
		Subnet: deploySubnet, AuditLog: true})
}

// applier applies unstructured objects with server-side apply.
type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(t *testing.T, cfg *rest.Config) *applier {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(k.Discovery()))}
}

func (a *applier) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s %s: the API server does not serve %s: %w", o.GetKind(), o.GetName(), gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), nil
	}
	return a.dyn.Resource(m.Resource), nil
}

func (a *applier) apply(ctx context.Context, t *testing.T, o *unstructured.Unstructured, dryRun bool) {
	t.Helper()
	ri, err := a.resource(o)
	if err != nil {
		t.Error(err)
		return
	}
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := ri.Apply(ctx, o.GetName(), o, opts); err != nil {
		t.Errorf("apply %s %s/%s (dry run %v): %v", o.GetKind(), o.GetNamespace(), o.GetName(), dryRun, err)
	}
}

func waitCRDsEstablished(ctx context.Context, t *testing.T, a *applier, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		ri, err := a.resource(o)
		if err != nil {
			t.Fatal(err)
		}
		err = sandbox.Poll(ctx, 30*time.Second, "CRD "+o.GetName()+" Established", func(ctx context.Context) (bool, string, error) {
			got, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conds {
				m := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, "", nil
				}
			}
			return false, fmt.Sprintf("conditions %v", conds), nil
		}, func(context.Context) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
	}
}

// checkNodeRecoveryColumns creates a NodeRecovery with a status and reads the
// Table the API server gives kubectl for `kubectl get noderecoveries`.
func checkNodeRecoveryColumns(ctx context.Context, t *testing.T, s *sandbox.Sandbox, a *applier) {
	nr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "vigil.io/v1alpha1", "kind": "NodeRecovery",
		"metadata": map[string]any{"name": "node-1-e2e"},
		"spec":     map[string]any{"nodeName": "node-1"},
	}}
	ri, err := a.resource(nr)
	if err != nil {
		t.Fatal(err)
	}
	created, err := ri.Create(ctx, nr, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["status"] = map[string]any{"phase": "Recovered", "reason": "NodeUnreachable", "podCount": int64(3), "timeToRecover": "4.2s"}
	if _, err := ri.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	bad := nr.DeepCopy()
	bad.SetName("bad")
	bad.Object["spec"] = map[string]any{"nodeName": ""}
	if _, err := ri.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("a NodeRecovery with an empty nodeName: %v, want Invalid", err)
	}

	hc, err := rest.HTTPClientFor(s.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.RESTConfig().Host+"/apis/vigil.io/v1alpha1/noderecoveries", nil)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET noderecoveries as a Table: %s: %v: %s", resp.Status, err, body)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		name := c.Name
		if c.Priority > 0 {
			name += " (wide)"
		}
		cols = append(cols, name)
	}
	if want := "Name Node Phase Reason (wide) Pods Time-To-Recover Age"; strings.Join(cols, " ") != want {
		t.Errorf("columns %q, want %q", strings.Join(cols, " "), want)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(table.Rows))
	}
	cells := fmt.Sprint(table.Rows[0].Cells[:6])
	if want := "[node-1-e2e node-1 Recovered NodeUnreachable 3 4.2s]"; cells != want {
		t.Errorf("row %s, want %s", cells, want)
	}
	t.Logf("kubectl get noderecoveries -o wide would print: %v / %v", cols, table.Rows[0].Cells)
}

// outcome is what a call under a component's identity must get.
type outcome int

const (
	allowed      outcome = iota
	rbacDenied           // refused by RBAC: the role does not allow it
	policyDenied         // allowed by RBAC, refused by the admission policy
)

// checkRolesWithTokens applies the ServiceAccounts, roles and the engine's
// admission policy for real, takes tokens through TokenRequest (the engine's
// bound to Node node-1, as a pod's would be) and makes calls inside and
// outside each role; mutations are dry runs, which RBAC and admission judge as
// real ones. Each call must be in the audit log with the same verdict that
// deploytest.Allows gives from the manifests: the mechanism that will map every
// call of the suite to a rule.
func checkRolesWithTokens(ctx context.Context, t *testing.T, s *sandbox.Sandbox, a *applier, objs []*unstructured.Unstructured) {
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			a.apply(ctx, t, o, false)
		}
	}
	grants, err := deploytest.Grants(objs)
	if err != nil {
		t.Fatal(err)
	}
	admin := s.Client()
	node1, err := admin.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// node-1 carries the fenced taint, so that the engine has something to remove.
	patch := fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"effect":"NoSchedule"}]}}`, vigil.FencedTaintKey)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "node-1", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	manager := tokenClient(ctx, t, s, "vigil-manager", nil)
	engine := tokenClient(ctx, t, s, "vigil-engine-node", &authv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: "node-1", UID: node1.UID})
	dry := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	untainted := func(name string) *corev1.Node {
		n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Taints = nil
		return n
	}
	relabelled := func(name string) *corev1.Node {
		n := untainted(name)
		n.Labels["vigil.io/stolen"] = "yes"
		return n
	}
	calls := []struct {
		who, what string
		want      outcome
		req       deploytest.Request
		call      func() error
	}{
		{"vigil-manager", "list pods", allowed, deploytest.Request{Verb: "list", Resource: "pods"},
			func() error { _, err := manager.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err }},
		{"vigil-manager", "patch node-1's status (volumesInUse)", allowed, deploytest.Request{Verb: "patch", Resource: "nodes/status", Name: "node-1"},
			func() error {
				_, err := manager.CoreV1().Nodes().Patch(ctx, "node-1", types.MergePatchType, []byte(`{"status":{"volumesInUse":null}}`),
					metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
				return err
			}},
		{"vigil-manager", "delete a Secret", rbacDenied, deploytest.Request{Verb: "delete", Resource: "secrets", Namespace: "default", Name: "x"},
			func() error {
				return manager.CoreV1().Secrets("default").Delete(ctx, "x", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			}},
		{"vigil-manager", "patch a Deployment", rbacDenied, deploytest.Request{Verb: "patch", Group: "apps", Resource: "deployments", Namespace: "default", Name: "web"},
			func() error {
				_, err := manager.AppsV1().Deployments("default").Patch(ctx, "web", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
				return err
			}},
		{"vigil-engine-node", "remove vigil.io/fenced from its own node", allowed, deploytest.Request{Verb: "update", Resource: "nodes", Name: "node-1"},
			func() error { _, err := engine.CoreV1().Nodes().Update(ctx, untainted("node-1"), dry); return err }},
		{"vigil-engine-node", "change another node's taints", policyDenied, deploytest.Request{Verb: "update", Resource: "nodes", Name: "node-2"},
			func() error {
				n := untainted("node-2")
				n.Spec.Taints = []corev1.Taint{{Key: vigil.FencedTaintKey, Effect: corev1.TaintEffectNoSchedule}}
				_, err := engine.CoreV1().Nodes().Update(ctx, n, dry)
				return err
			}},
		{"vigil-engine-node", "label its own node", policyDenied, deploytest.Request{Verb: "update", Resource: "nodes", Name: "node-1"},
			func() error { _, err := engine.CoreV1().Nodes().Update(ctx, relabelled("node-1"), dry); return err }},
		{"vigil-engine-node", "delete a pod", rbacDenied, deploytest.Request{Verb: "delete", Resource: "pods", Namespace: "default", Name: "web-0"},
			func() error {
				return engine.CoreV1().Pods("default").Delete(ctx, "web-0", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			}},
		{"vigil-engine-node", "patch node status", rbacDenied, deploytest.Request{Verb: "patch", Resource: "nodes/status", Name: "node-1"},
			func() error {
				_, err := engine.CoreV1().Nodes().Patch(ctx, "node-1", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
				return err
			}},
	}
	// The API server loads a new admission policy asynchronously: wait until
	// it refuses what it must refuse, then judge every call.
	err = sandbox.Poll(ctx, 30*time.Second, "admission policy vigil-engine-node-own-node in force", func(context.Context) (bool, string, error) {
		err := calls[len(calls)-3].call()
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), fmt.Sprint(err), nil
	}, func(context.Context) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		err := c.call()
		switch {
		case c.want == allowed && err != nil:
			t.Errorf("%s: %s: %v, want allowed", c.who, c.what, err)
		case c.want != allowed && !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
			t.Errorf("%s: %s: %v, want refused", c.who, c.what, err)
		case c.want == policyDenied && !strings.Contains(fmt.Sprint(err), "vigil-engine-node-own-node"):
			t.Errorf("%s: %s: %v, want the refusal of the admission policy vigil-engine-node-own-node", c.who, c.what, err)
		}
		if rbac := deploytest.Allows(grants[vigil.Namespace+"/"+c.who], c.req); rbac != (c.want != rbacDenied) {
			t.Errorf("%s: %s: the manifests' roles allow %s: %v, but the call is expected %v", c.who, c.what, c.req, rbac, c.want)
		}
	}
	checkAudit(t, s, grants, len(calls))
}

// checkAudit maps every recorded request of Vigil's identities to the roles of
// the manifests: a request RBAC refused (403 with no admission message) must be
// outside the role, any other inside it.
func checkAudit(t *testing.T, s *sandbox.Sandbox, grants map[string][]deploytest.Grant, calls int) {
	evs, err := s.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		sa, ok := strings.CutPrefix(e.User, "system:serviceaccount:")
		if !ok || !strings.HasPrefix(sa, vigil.Namespace+":") {
			continue
		}
		n++
		res := e.Resource
		if e.Subresource != "" {
			res += "/" + e.Subresource
		}
		req := deploytest.Request{Verb: e.Verb, Group: e.APIGroup, Resource: res, Namespace: e.Namespace, Name: e.Name}
		allowedByRoles := deploytest.Allows(grants[strings.Replace(sa, ":", "/", 1)], req)
		if e.Code == http.StatusForbidden && allowedByRoles && !(e.Verb == "update" && e.Resource == "nodes") {
			t.Errorf("audit: %s %s refused (403) though the roles allow it", e.User, req)
		}
		if e.Code != http.StatusForbidden && !allowedByRoles {
			t.Errorf("audit: %s %s answered %d though the roles do not allow it", e.User, req, e.Code)
		}
		if e.User == "system:serviceaccount:vigil-system:vigil-engine-node" {
			if nn := e.Extra["authentication.kubernetes.io/node-name"]; len(nn) != 1 || nn[0] != "node-1" {
				t.Errorf("audit: the engine's token carries node %v, want node-1", nn)
			}
		}
	}
	t.Logf("audit: %d requests of Vigil's identities, each mapped to the roles of deploy/", n)
	if n < calls {
		t.Errorf("the audit log holds %d requests of Vigil's identities, want at least the %d made", n, calls)
	}
}

// tokenClient is a client that authenticates with a fresh token of
// ServiceAccount vigil-system/sa (TokenRequest), bound to obj when given.
func tokenClient(ctx context.Context, t *testing.T, s *sandbox.Sandbox, sa string, obj *authv1.BoundObjectReference) kubernetes.Interface {
	t.Helper()
	exp := int64(600)
	tr, err := s.Client().CoreV1().ServiceAccounts(vigil.Namespace).CreateToken(ctx, sa,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp, BoundObjectRef: obj}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", sa, err)
	}
	admin := s.RESTConfig()
	cfg := &rest.Config{Host: admin.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData, CAFile: admin.CAFile}}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDeploy_SidecarFlags: the flags deploy/ gives the upstream CSI sidecars
// exist in the versions the sandbox builds (`make testbin`), which are the
// versions of deploy/'s images.
func TestDeploy_SidecarFlags(t *testing.T) {
	objs, err := deploytest.Build(deploytest.Dir())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := deploytest.Workloads(objs)
	if err != nil {
		t.Fatal(err)
	}
	bins := map[string]string{"csi-provisioner": sandbox.BinCSIProvisioner, "csi-attacher": sandbox.BinCSIAttacher}
	checked := 0
	for _, w := range ws {
		for _, c := range w.Spec.Containers {
			bin, ok := bins[c.Name]
			if !ok {
				continue
			}
			path := filepath.Join(sandbox.BinDir(), bin)
			_, err := os.Stat(path)
			testenv.Require(t, bin, err == nil, "make testbin builds it into "+sandbox.BinDir())
			out, _ := exec.Command(path, "--help").CombinedOutput()
			for _, a := range c.Args {
				name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if !strings.Contains(string(out), "-"+name+" ") && !strings.Contains(string(out), "-"+name+"\n") {
					t.Errorf("%s/%s: %s has no flag --%s", w.Name, c.Name, bin, name)
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("no sidecar flag checked")
	}
}
