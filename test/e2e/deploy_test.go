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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// TestDeploy_ApplyServerDryRun is the `kubectl apply --dry-run=server
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
	// Established comes before the API server's discovery lists the kind.
	var ri dynamic.ResourceInterface
	err := sandbox.Poll(ctx, 30*time.Second, "vigil.io/v1alpha1 in discovery", func(context.Context) (bool, string, error) {
		var err error
		if ri, err = a.resource(nr); err != nil {
			a.mapper.Reset()
			return false, err.Error(), nil
		}
		return true, "", nil
	}, nil)
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
