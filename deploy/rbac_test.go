package deploy_test

import (
	"slices"
	"testing"

	"github.com/vigil-storage/vigil/deploy/deploytest"
)

// Service accounts of the components.
const (
	saManager  = "vigil-system/vigil-manager"
	saDatapath = "vigil-system/vigil-datapath"
	saCSI      = "vigil-system/vigil-csi-controller"
	saEngine   = "vigil-system/vigil-engine-node"
	saCerts    = "vigil-system/vigil-certs"
)

// certsSecretRule: the one rule on Secrets deploy/ may have: the certificates
// Job's, in its own namespace, reading its Secrets by name and creating the
// missing ones; never update, delete, list or watch.
func certsSecretRule(sa string, g deploytest.Grant) bool {
	r := g.Rule
	if sa != saCerts || g.Namespace != "vigil-system" || len(r.Resources) != 1 || len(r.Verbs) != 1 {
		return false
	}
	switch r.Verbs[0] {
	case "get":
		return len(r.ResourceNames) > 0
	case "create":
		return true
	}
	return false
}

// rbacVerbs are the verbs Vigil's roles may use: the ordinary ones, never
// "*", escalate, bind or impersonate.
var rbacVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// TestRBAC_Rules_LeastPrivilege: exact verbs on exact resources, no Secrets,
// every ServiceAccount bound and every role used.
func TestRBAC_Rules_LeastPrivilege(t *testing.T) {
	objs := build(t, "base")
	grants, err := deploytest.Grants(objs)
	if err != nil {
		t.Fatal(err)
	}
	for sa, gs := range grants {
		for _, g := range gs {
			r := g.Rule
			for _, list := range [][]string{r.Verbs, r.APIGroups, r.Resources, r.ResourceNames, r.NonResourceURLs} {
				if slices.Contains(list, "*") {
					t.Errorf("%s (%s): a wildcard in %v", sa, g.Role, r)
				}
			}
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("%s (%s): non-resource URLs %v", sa, g.Role, r.NonResourceURLs)
			}
			for _, v := range r.Verbs {
				if !slices.Contains(rbacVerbs, v) {
					t.Errorf("%s (%s): verb %q, want one of %v", sa, g.Role, v, rbacVerbs)
				}
			}
			if slices.Contains(r.Resources, "secrets") && !certsSecretRule(sa, g) {
				t.Errorf("%s (%s): access to Secrets %v; only %s may, and only get (by name) and create in %s", sa, g.Role, r, saCerts, "vigil-system")
			}
		}
	}
	used := map[string]bool{}
	for _, gs := range grants {
		for _, g := range gs {
			used[g.Role] = true
		}
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount":
			if len(grants[o.GetNamespace()+"/"+o.GetName()]) == 0 {
				t.Errorf("ServiceAccount %s is bound to no role", o.GetName())
			}
		case "ClusterRole":
			if !used["ClusterRole/"+o.GetName()] {
				t.Errorf("ClusterRole %s is bound to nobody", o.GetName())
			}
		case "Role":
			if !used["Role/"+o.GetNamespace()+"/"+o.GetName()] {
				t.Errorf("Role %s is bound to nobody", o.GetName())
			}
		}
	}
	for _, sa := range []string{saManager, saDatapath, saCSI, saEngine, saCerts} {
		if len(grants[sa]) == 0 {
			t.Errorf("%s has no rules", sa)
		}
	}
}

// TestRBAC_Allows_DecisionTable is the safety table of the roles: who may
// delete pods and attachments, who may touch Node status, and what each
// component must not do. The sandbox proves the same table against a real API
// server (test/e2e).
func TestRBAC_Allows_DecisionTable(t *testing.T) {
	grants, err := deploytest.Grants(build(t, "base"))
	if err != nil {
		t.Fatal(err)
	}
	r := func(verb, group, resource, ns, name string) deploytest.Request {
		return deploytest.Request{Verb: verb, Group: group, Resource: resource, Namespace: ns, Name: name}
	}
	for _, tc := range []struct {
		sa   string
		req  deploytest.Request
		want bool
	}{
		// The manager: the reaper, attachment recovery, fencing, its Lease and settings.
		{saManager, r("delete", "", "pods", "default", "web-0"), true},
		{saManager, r("delete", "storage.k8s.io", "volumeattachments", "", "csi-1"), true},
		{saManager, r("patch", "", "nodes/status", "", "node-a"), true},
		{saManager, r("patch", "", "nodes", "", "node-a"), true},
		{saManager, r("update", "coordination.k8s.io", "leases", "vigil-system", "vigil-manager"), true},
		{saManager, r("update", "coordination.k8s.io", "leases", "vigil-system", "other"), false},
		{saManager, r("update", "", "configmaps", "vigil-system", "vigil-settings"), true},
		{saManager, r("update", "", "configmaps", "vigil-system", "vigil-settings-managed"), false},
		{saManager, r("update", "", "configmaps", "default", "vigil-settings"), false},
		{saManager, r("create", "vigil.io", "noderecoveries", "", ""), true},
		{saManager, r("get", "", "secrets", "vigil-system", "x"), false},
		{saManager, r("patch", "apps", "deployments", "default", "web"), false},
		{saManager, r("delete", "", "nodes", "", "node-a"), false},
		{saManager, r("delete", "", "persistentvolumes", "", "pv-1"), false},
		{saManager, r("create", "", "pods", "default", ""), false},
		// The engine: its node's taint, the pods on its node, Events.
		{saEngine, r("update", "", "nodes", "", "node-a"), true},
		{saEngine, r("list", "", "pods", "", ""), true},
		{saEngine, r("delete", "", "pods", "default", "web-0"), false},
		{saEngine, r("patch", "", "nodes/status", "", "node-a"), false},
		{saEngine, r("delete", "storage.k8s.io", "volumeattachments", "", "csi-1"), false},
		{saEngine, r("list", "", "secrets", "", ""), false},
		// The CSI controller: provisioning and attaching, nothing of the reaper.
		{saCSI, r("create", "", "persistentvolumes", "", ""), true},
		{saCSI, r("patch", "storage.k8s.io", "volumeattachments/status", "", "csi-1"), true},
		{saCSI, r("update", "coordination.k8s.io", "leases", "vigil-system", "driver-vigil-io"), true},
		{saCSI, r("update", "coordination.k8s.io", "leases", "kube-system", "driver-vigil-io"), false},
		{saCSI, r("delete", "", "pods", "default", "web-0"), false},
		{saCSI, r("delete", "storage.k8s.io", "volumeattachments", "", "csi-1"), false},
		{saCSI, r("patch", "", "nodes/status", "", "node-a"), false},
		// The certificates Job: its own Secrets, nothing else.
		{saCerts, r("get", "", "secrets", "vigil-system", "vigil-ca"), true},
		{saCerts, r("create", "", "secrets", "vigil-system", ""), true},
		{saCerts, r("get", "", "secrets", "vigil-system", "other"), false},
		{saCerts, r("list", "", "secrets", "vigil-system", ""), false},
		{saCerts, r("update", "", "secrets", "vigil-system", "vigil-ca"), false},
		{saCerts, r("delete", "", "secrets", "vigil-system", "vigil-ca"), false},
		{saCerts, r("create", "", "secrets", "default", ""), false},
		{saCerts, r("list", "", "pods", "", ""), false},
		// The datapath: TokenReview, nothing else.
		{saDatapath, r("create", "authentication.k8s.io", "tokenreviews", "", ""), true},
		{saDatapath, r("list", "", "pods", "", ""), false},
		{saDatapath, r("get", "", "nodes", "", "node-a"), false},
	} {
		if got := deploytest.Allows(grants[tc.sa], tc.req); got != tc.want {
			t.Errorf("%s may %s: %v, want %v", tc.sa, tc.req, got, tc.want)
		}
	}
	// Only the manager clears volumesInUse.
	for sa, gs := range grants {
		if sa != saManager && deploytest.Allows(gs, r("patch", "", "nodes/status", "", "node-a")) {
			t.Errorf("%s may patch Node status; only the manager may", sa)
		}
	}
}
