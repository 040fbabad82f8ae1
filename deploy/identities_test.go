package deploy_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/vigil-storage/vigil/deploy"
)

// TestIdentities_SameAsKustomize: what the sandbox applies without kustomize
// is exactly what `kubectl apply -k deploy/` applies for those objects, and
// nothing of the base's identities is missing.
func TestIdentities_SameAsKustomize(t *testing.T) {
	got, err := deploy.Identities()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, o := range build(t, ".") {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			b, err := json.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			want[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = string(b)
		}
	}
	seen := map[string]bool{}
	for _, o := range got {
		id := o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
		b, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		w, ok := want[id]
		switch {
		case !ok:
			t.Errorf("Identities returns %s, which kustomize does not build", id)
		case w != string(b):
			t.Errorf("%s differs from kustomize's:\n got %s\nwant %s", id, b, w)
		}
		seen[id] = true
	}
	for id := range want {
		if !seen[id] {
			t.Errorf("kustomize builds %s, which Identities lacks", id)
		}
	}
	if len(got) < 12 {
		t.Errorf("%d objects, want the 4 ServiceAccounts, their roles and bindings and the policy", len(got))
	}
}

// The ServiceAccounts of deploy/, for a program that runs the components
// under them.
func ExampleIdentities() {
	objs, err := deploy.Identities()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range objs {
		if o.GetKind() == "ServiceAccount" {
			fmt.Println(o.GetNamespace() + "/" + o.GetName())
		}
	}
	// Output:
	// vigil-system/vigil-certs
	// vigil-system/vigil-csi-controller
	// vigil-system/vigil-datapath
	// vigil-system/vigil-engine-node
	// vigil-system/vigil-manager
}
