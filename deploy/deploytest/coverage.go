package deploytest

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
)

// Call is one API request made under a ServiceAccount, as the API server
// judged it (one event of its audit log).
type Call struct {
	// ServiceAccount is "namespace/name", as the keys of Grants.
	ServiceAccount string
	Request
	// Authorized: the authorizer allowed the request (audit annotation
	// authorization.k8s.io/decision "allow"); Reason is what it said.
	Authorized bool
	Reason     string
	// Code is the HTTP status of the answer.
	Code int
}

func (c Call) String() string {
	return fmt.Sprintf("%s %s (HTTP %d)", c.ServiceAccount, c.Request, c.Code)
}

// Permission is one verb on one resource that one rule of a role gives a
// ServiceAccount: the unit in which the roles' use is counted.
type Permission struct {
	ServiceAccount, Role  string
	Verb, Group, Resource string
	// Namespace is the namespace of a Role or RoleBinding; "" cluster-wide.
	Namespace string
	// ResourceNames narrows the permission to these names when not empty.
	ResourceNames []string
}

// ID names the permission without its role, as an allow-list keys it:
// "vigil-system/vigil-manager update configmaps" (".group" after a
// resource of a named group).
func (p Permission) ID() string {
	r := p.Resource
	if p.Group != "" {
		r += "." + p.Group
	}
	return p.ServiceAccount + " " + p.Verb + " " + r
}

func (p Permission) String() string {
	s := p.ID()
	if p.Namespace != "" {
		s += " in " + p.Namespace
	}
	if len(p.ResourceNames) > 0 {
		s += " named " + strings.Join(p.ResourceNames, ",")
	}
	return s + " (" + p.Role + ")"
}

// Allows reports whether p allows req, with RBAC's matching (see Allows).
func (p Permission) Allows(req Request) bool {
	g := Grant{Role: p.Role, Namespace: p.Namespace}
	g.Rule.Verbs, g.Rule.APIGroups, g.Rule.Resources = []string{p.Verb}, []string{p.Group}, []string{p.Resource}
	g.Rule.ResourceNames = p.ResourceNames
	return Allows([]Grant{g}, req)
}

// Permissions splits every rule of grants into its permissions, one per
// verb, API group and resource, sorted by ID.
func Permissions(grants map[string][]Grant) []Permission {
	var out []Permission
	for sa, gs := range grants {
		for _, g := range gs {
			for _, v := range g.Rule.Verbs {
				for _, grp := range g.Rule.APIGroups {
					for _, res := range g.Rule.Resources {
						out = append(out, Permission{ServiceAccount: sa, Role: g.Role, Verb: v, Group: grp, Resource: res,
							Namespace: g.Namespace, ResourceNames: g.Rule.ResourceNames})
					}
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Unused returns the permissions of grants that no authorized call of its
// ServiceAccount used.
func Unused(grants map[string][]Grant, calls []Call) []Permission {
	var out []Permission
	for _, p := range Permissions(grants) {
		used := slices.ContainsFunc(calls, func(c Call) bool {
			return c.Authorized && c.ServiceAccount == p.ServiceAccount && p.Allows(c.Request)
		})
		if !used {
			out = append(out, p)
		}
	}
	return out
}

// Problems compares the calls of components running under their identities
// with the roles of grants and returns one line per disagreement:
//   - a call the authorizer refused: the code needs a permission its roles
//     lack (or makes a call it should not);
//   - a call the authorizer allowed that the roles do not: something outside
//     deploy/ granted it, and a cluster without that grant would refuse it;
//   - a call the roles allow that was refused all the same (403): an
//     admission policy refused what the component does.
//
// Calls of ServiceAccounts that grants does not know are problems too.
// Requests of no resource (discovery: /api, /apis, /version, which
// Kubernetes' system:discovery role allows every user) are not judged.
func Problems(grants map[string][]Grant, calls []Call) []string {
	var out []string
	for _, c := range calls {
		if c.Resource == "" {
			continue
		}
		gs, known := grants[c.ServiceAccount]
		roles := Allows(gs, c.Request)
		switch {
		case !known:
			out = append(out, fmt.Sprintf("%s: a ServiceAccount with no role in deploy/", c))
		case !c.Authorized && c.Code == http.StatusForbidden:
			out = append(out, fmt.Sprintf("%s: refused by RBAC: the code makes a call its roles do not allow", c))
		case c.Authorized && !roles:
			out = append(out, fmt.Sprintf("%s: allowed though deploy/'s roles do not allow it (%s)", c, c.Reason))
		case c.Authorized && c.Code == http.StatusForbidden:
			out = append(out, fmt.Sprintf("%s: allowed by its roles but refused by admission", c))
		}
	}
	return out
}
