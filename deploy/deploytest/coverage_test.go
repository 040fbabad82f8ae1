package deploytest_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/vigil-storage/vigil/deploy/deploytest"
)

var coverageGrants = map[string][]deploytest.Grant{
	"ns/a": {
		{Role: "ClusterRole/a", Rule: rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "delete"}}},
		{Role: "Role/ns/a", Namespace: "ns", Rule: rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			ResourceNames: []string{"l"}, Verbs: []string{"get"}}},
	},
}

func TestPermissions_OnePerVerbAndResource(t *testing.T) {
	var got []string
	for _, p := range deploytest.Permissions(coverageGrants) {
		got = append(got, p.String())
	}
	want := []string{
		"ns/a delete pods (ClusterRole/a)",
		"ns/a get leases.coordination.k8s.io in ns named l (Role/ns/a)",
		"ns/a list pods (ClusterRole/a)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("permissions\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestUnused_OnlyAuthorizedCallsCount(t *testing.T) {
	calls := []deploytest.Call{
		{ServiceAccount: "ns/a", Request: deploytest.Request{Verb: "list", Resource: "pods"}, Authorized: true, Code: http.StatusOK},
		// Refused calls and other identities' calls use nothing.
		{ServiceAccount: "ns/a", Request: deploytest.Request{Verb: "delete", Resource: "pods", Namespace: "x", Name: "p"}, Code: http.StatusForbidden},
		{ServiceAccount: "ns/b", Request: deploytest.Request{Verb: "delete", Resource: "pods", Namespace: "x", Name: "p"}, Authorized: true, Code: http.StatusOK},
		// Another lease's name, another namespace: not this permission.
		{ServiceAccount: "ns/a", Request: deploytest.Request{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "ns", Name: "m"}, Authorized: true, Code: http.StatusNotFound},
		{ServiceAccount: "ns/a", Request: deploytest.Request{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "other", Name: "l"}, Authorized: true, Code: http.StatusOK},
	}
	var got []string
	for _, p := range deploytest.Unused(coverageGrants, calls) {
		got = append(got, p.ID())
	}
	if want := "ns/a delete pods,ns/a get leases.coordination.k8s.io"; strings.Join(got, ",") != want {
		t.Errorf("unused %q, want %q", strings.Join(got, ","), want)
	}
	// A 404 is a use: the call was authorized.
	calls = append(calls, deploytest.Call{ServiceAccount: "ns/a", Request: deploytest.Request{Verb: "get", Group: "coordination.k8s.io",
		Resource: "leases", Namespace: "ns", Name: "l"}, Authorized: true, Code: http.StatusNotFound})
	if got := deploytest.Unused(coverageGrants, calls); len(got) != 1 || got[0].Verb != "delete" {
		t.Errorf("unused %v, want only delete pods", got)
	}
}

func TestProblems_EachDisagreement(t *testing.T) {
	list := deploytest.Request{Verb: "list", Resource: "pods"}
	create := deploytest.Request{Verb: "create", Resource: "pods", Namespace: "x"}
	for _, tc := range []struct {
		name string
		call deploytest.Call
		want string // "" for no problem
	}{
		{"inside the role", deploytest.Call{ServiceAccount: "ns/a", Request: list, Authorized: true, Code: 200}, ""},
		{"a not found inside the role", deploytest.Call{ServiceAccount: "ns/a", Request: list, Authorized: true, Code: 404}, ""},
		{"refused by RBAC", deploytest.Call{ServiceAccount: "ns/a", Request: create, Code: 403}, "refused by RBAC"},
		{"allowed by another grant", deploytest.Call{ServiceAccount: "ns/a", Request: create, Authorized: true, Code: 201, Reason: "cluster-admin"},
			"deploy/'s roles do not allow it (cluster-admin)"},
		{"refused by admission", deploytest.Call{ServiceAccount: "ns/a", Request: list, Authorized: true, Code: 403}, "refused by admission"},
		{"unknown identity", deploytest.Call{ServiceAccount: "ns/z", Request: list, Authorized: true, Code: 200}, "no role in deploy/"},
		{"discovery", deploytest.Call{ServiceAccount: "ns/a", Request: deploytest.Request{Verb: "get"}, Authorized: true, Code: 200}, ""},
		{"throttled before authorization", deploytest.Call{ServiceAccount: "ns/a", Request: create, Code: 429}, ""},
	} {
		got := deploytest.Problems(coverageGrants, []deploytest.Call{tc.call})
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("%s: problems %q, want none", tc.name, got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
			t.Errorf("%s: problems %q, want one saying %q", tc.name, got, tc.want)
		}
	}
}

// Which permissions of deploy/ a run used, from its calls (the API server's
// audit log in the end-to-end suite).
func ExampleUnused() {
	objs, err := deploytest.Build(deploytest.Dir())
	if err != nil {
		fmt.Println(err)
		return
	}
	grants, _ := deploytest.Grants(objs)
	calls := []deploytest.Call{{ServiceAccount: "vigil-system/vigil-datapath", Authorized: true, Code: 201,
		Request: deploytest.Request{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}}}
	for _, p := range deploytest.Unused(grants, calls) {
		if p.ServiceAccount == "vigil-system/vigil-datapath" {
			fmt.Println("unused:", p)
		}
	}
	fmt.Println(len(deploytest.Problems(grants, calls)), "problems")
	// Output: 0 problems
}
