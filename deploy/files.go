package deploy

import "embed"

// Files holds deploy/'s kustomizations as `kubectl apply -k` reads them:
// kustomization.yaml, base/, crds/ and overlays/, so that a program renders
// one without the source tree (vigil-sandbox up --install renders
// overlays/sandbox from it).
//
//go:embed kustomization.yaml base crds overlays
var Files embed.FS
