// Package deploy embeds Vigil's Kubernetes manifests that programs apply
// themselves: the CustomResourceDefinitions (the sandbox and the end-to-end
// tests install them; `kubectl apply -k deploy/` installs everything on a real
// cluster).
package deploy

import "embed"

// CRDs holds crds/*.yaml.
//
//go:embed crds/*.yaml
var CRDs embed.FS
