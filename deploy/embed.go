// Package deploy holds Vigil's Kubernetes manifests and embeds the ones that
// programs apply themselves: the CustomResourceDefinitions (the sandbox and the
// end-to-end tests install them) and the components' identities (Identities:
// the sandbox runs every component under them). `kubectl apply -k deploy/` installs everything
// on a real cluster: deploy/base is the kustomize base, deploy/crds the CRDs it
// includes, deploy/overlays/dev an example overlay; deploy/README.md explains
// them. Package deploy/deploytest builds them in Go for the tests that keep the
// manifests and the code in step.
package deploy

import "embed"

// CRDs holds crds/vigil.io_*.yaml, one CustomResourceDefinition per file (not
// the directory's kustomization.yaml).
//
//go:embed crds/vigil.io_*.yaml
var CRDs embed.FS
