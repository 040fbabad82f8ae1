package deploy

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	vigil "github.com/vigil-storage/vigil"
)

// identityFiles are the base's RBAC files (one ServiceAccount, its roles and
// bindings per component) and the engine's admission policy.
//
//go:embed base/*-rbac.yaml base/engine-node-policy.yaml
var identityFiles embed.FS

// PartOfLabel is the label deploy/base puts on every object (its
// kustomization's labels:), which Identities adds as kustomize does.
const PartOfLabel = "app.kubernetes.io/part-of"

// namespacedIdentityKinds are the kinds of the identity files that live in a
// namespace; the base's kustomization puts them into vigil.Namespace.
var namespacedIdentityKinds = map[string]bool{"ServiceAccount": true, "Role": true, "RoleBinding": true}

// Identities returns the objects that give each component its identity in
// deploy/base, as `kustomize build deploy/` renders them: the ServiceAccounts,
// ClusterRoles, Roles and their bindings, and the engine's
// ValidatingAdmissionPolicy with its binding. Programs that run Vigil's
// components under these identities without kustomize (the sandbox) apply
// them; the tests of package deploy check that they are exactly what
// kustomize builds.
func Identities() ([]*unstructured.Unstructured, error) {
	files, err := fs.Glob(identityFiles, "base/*.yaml")
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("deploy identities: no manifests embedded (%v)", err)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		b, err := identityFiles.ReadFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := splitYAML(f, b)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// splitYAML decodes the documents of one file and applies the base's
// kustomization transforms that concern them: the namespace and the label.
func splitYAML(name string, b []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for i, doc := range strings.Split("\n"+string(b), "\n---") {
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &o.Object); err != nil {
			return nil, fmt.Errorf("deploy identities: %s document %d: %w", name, i+1, err)
		}
		if len(o.Object) == 0 {
			continue // only comments
		}
		if o.GetKind() == "" || o.GetName() == "" {
			return nil, fmt.Errorf("deploy identities: %s document %d: kind and metadata.name are required", name, i+1)
		}
		if namespacedIdentityKinds[o.GetKind()] {
			o.SetNamespace(vigil.Namespace)
		}
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[PartOfLabel] = "vigil"
		o.SetLabels(labels)
		out = append(out, o)
	}
	return out, nil
}
