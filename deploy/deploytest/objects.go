package deploytest

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Decode converts u into out (a typed object such as *appsv1.Deployment),
// refusing fields the type does not have, so a misspelt field is an error
// instead of a setting that silently does nothing.
func Decode(u *unstructured.Unstructured, out any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// Find returns the object of kind and name, nil if there is none.
func Find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// Workload is the pod template of a Deployment, StatefulSet, DaemonSet or Job.
type Workload struct {
	Kind, Name, Namespace string
	Spec                  corev1.PodSpec
}

// Workloads returns the pod templates of every Deployment, StatefulSet,
// DaemonSet and Job in objs.
func Workloads(objs []*unstructured.Unstructured) ([]Workload, error) {
	var ws []Workload
	for _, o := range objs {
		var spec *corev1.PodTemplateSpec
		switch o.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			if err := Decode(o, &d); err != nil {
				return nil, err
			}
			spec = &d.Spec.Template
		case "StatefulSet":
			var s appsv1.StatefulSet
			if err := Decode(o, &s); err != nil {
				return nil, err
			}
			spec = &s.Spec.Template
		case "DaemonSet":
			var d appsv1.DaemonSet
			if err := Decode(o, &d); err != nil {
				return nil, err
			}
			spec = &d.Spec.Template
		case "Job":
			var j batchv1.Job
			if err := Decode(o, &j); err != nil {
				return nil, err
			}
			spec = &j.Spec.Template
		default:
			continue
		}
		ws = append(ws, Workload{Kind: o.GetKind(), Name: o.GetName(), Namespace: o.GetNamespace(), Spec: spec.Spec})
	}
	return ws, nil
}

// Grant is one RBAC rule that reaches a ServiceAccount, with the role and
// binding it came from; Namespace is "" for a ClusterRole bound cluster-wide.
type Grant struct {
	Role, Namespace string
	Rule            rbacv1.PolicyRule
}

// Grants returns, per ServiceAccount ("namespace/name"), the rules its
// RoleBindings and ClusterRoleBindings in objs give it. A binding whose role is
// not in objs is an error (built-in roles are not used by Vigil).
func Grants(objs []*unstructured.Unstructured) (map[string][]Grant, error) {
	roles := map[string][]rbacv1.PolicyRule{} // "ClusterRole/name" or "Role/ns/name"
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := Decode(o, &r); err != nil {
				return nil, err
			}
			roles["ClusterRole/"+r.Name] = r.Rules
		case "Role":
			var r rbacv1.Role
			if err := Decode(o, &r); err != nil {
				return nil, err
			}
			roles["Role/"+r.Namespace+"/"+r.Name] = r.Rules
		}
	}
	out := map[string][]Grant{}
	add := func(subjects []rbacv1.Subject, key, ns, binding string) error {
		rules, ok := roles[key]
		if !ok {
			return fmt.Errorf("%s refers to %s, which is not in the manifests", binding, key)
		}
		for _, s := range subjects {
			if s.Kind != rbacv1.ServiceAccountKind {
				return fmt.Errorf("%s binds %s %s: only ServiceAccounts are expected", binding, s.Kind, s.Name)
			}
			for _, r := range rules {
				out[s.Namespace+"/"+s.Name] = append(out[s.Namespace+"/"+s.Name], Grant{Role: key, Namespace: ns, Rule: r})
			}
		}
		return nil
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err := Decode(o, &b); err != nil {
				return nil, err
			}
			if err := add(b.Subjects, b.RoleRef.Kind+"/"+b.RoleRef.Name, "", "ClusterRoleBinding "+b.Name); err != nil {
				return nil, err
			}
		case "RoleBinding":
			var b rbacv1.RoleBinding
			if err := Decode(o, &b); err != nil {
				return nil, err
			}
			key := "ClusterRole/" + b.RoleRef.Name
			if b.RoleRef.Kind == "Role" {
				key = "Role/" + b.Namespace + "/" + b.RoleRef.Name
			}
			if err := add(b.Subjects, key, b.Namespace, "RoleBinding "+b.Namespace+"/"+b.Name); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// Request is one API request, as RBAC sees it.
type Request struct {
	Verb, Group, Resource, Namespace, Name string // Resource may be "nodes/status"; Namespace "" is cluster-scoped
}

func (r Request) String() string {
	s := r.Verb + " " + r.Resource
	if r.Group != "" {
		s += "." + r.Group
	}
	if r.Namespace != "" {
		s += " in " + r.Namespace
	}
	if r.Name != "" {
		s += " named " + r.Name
	}
	return s
}

// Allows reports whether grants allow req, with RBAC's matching (a
// namespaced Role applies in its namespace only; resourceNames narrow a rule
// to those names; "*" matches anything, though Vigil's rules never use it).
func Allows(grants []Grant, req Request) bool {
	match := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	for _, g := range grants {
		if g.Namespace != "" && g.Namespace != req.Namespace {
			continue
		}
		r := g.Rule
		if !match(r.Verbs, req.Verb) || !match(r.APIGroups, req.Group) || !match(r.Resources, req.Resource) {
			continue
		}
		if len(r.ResourceNames) > 0 && !slices.Contains(r.ResourceNames, req.Name) {
			continue
		}
		return true
	}
	return false
}
