package deploytest_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vigil-storage/vigil/deploy/deploytest"
)

func TestBuild_BadInput(t *testing.T) {
	dir := t.TempDir()
	if _, err := deploytest.Build(filepath.Join(dir, "missing")); !errors.Is(err, deploytest.ErrNotKustomization) {
		t.Errorf("missing directory: %v, want ErrNotKustomization", err)
	}
	if _, err := deploytest.Build(dir); !errors.Is(err, deploytest.ErrNotKustomization) {
		t.Errorf("directory without kustomization.yaml: %v, want ErrNotKustomization", err)
	}
	for name, content := range map[string]string{
		"missing resource": "resources:\n- nothing.yaml\n",
		"not yaml":         "resources: [\n",
		"outside its root": "resources:\n- ../../etc/passwd\n",
	} {
		d := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "kustomization.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := deploytest.Build(d)
		if err == nil || !strings.Contains(err.Error(), d) {
			t.Errorf("%s: error %v, want one that names %s", name, err, d)
		}
	}
}

func TestGrants_BindingToMissingRole(t *testing.T) {
	b := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": "b"},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "x", "namespace": "ns"}},
	}}
	if _, err := deploytest.Grants([]*unstructured.Unstructured{b}); err == nil || !strings.Contains(err.Error(), "cluster-admin") {
		t.Errorf("a binding to a role outside the manifests: %v, want an error naming it", err)
	}
	b.Object["roleRef"] = map[string]any{"kind": "ClusterRole", "name": "r", "bogus": 1}
	if _, err := deploytest.Grants([]*unstructured.Unstructured{b}); err == nil {
		t.Errorf("an unknown field accepted")
	}
}

func TestAllows_Matching(t *testing.T) {
	gs := []deploytest.Grant{
		{Role: "ClusterRole/a", Rule: rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "delete"}}},
		{Role: "Role/ns/b", Namespace: "ns", Rule: rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"},
			ResourceNames: []string{"one"}, Verbs: []string{"get"}}},
	}
	for _, tc := range []struct {
		req  deploytest.Request
		want bool
	}{
		{deploytest.Request{Verb: "delete", Resource: "pods", Namespace: "x"}, true},
		{deploytest.Request{Verb: "create", Resource: "pods", Namespace: "x"}, false},
		{deploytest.Request{Verb: "list", Group: "apps", Resource: "pods"}, false},
		{deploytest.Request{Verb: "list", Resource: "pods/log"}, false},
		{deploytest.Request{Verb: "get", Resource: "configmaps", Namespace: "ns", Name: "one"}, true},
		{deploytest.Request{Verb: "get", Resource: "configmaps", Namespace: "ns", Name: "two"}, false},
		{deploytest.Request{Verb: "get", Resource: "configmaps", Namespace: "other", Name: "one"}, false},
		{deploytest.Request{Verb: "get", Resource: "configmaps", Name: "one"}, false},
	} {
		if got := deploytest.Allows(gs, tc.req); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.req, got, tc.want)
		}
	}
}

// Build a kustomization as `kubectl apply -k` would, and ask what a
// ServiceAccount's roles allow.
func ExampleBuild() {
	objs, err := deploytest.Build(deploytest.Dir())
	if err != nil {
		fmt.Println(err)
		return
	}
	grants, err := deploytest.Grants(objs)
	if err != nil {
		fmt.Println(err)
		return
	}
	del := deploytest.Request{Verb: "delete", Resource: "pods", Namespace: "default", Name: "web-0"}
	fmt.Println("manager may", del, deploytest.Allows(grants["vigil-system/vigil-manager"], del))
	fmt.Println("engine may", del, deploytest.Allows(grants["vigil-system/vigil-engine-node"], del))
	// Output:
	// manager may delete pods in default named web-0 true
	// engine may delete pods in default named web-0 false
}
