// Package deploytest builds Vigil's kustomizations (deploy/, deploy/base,
// deploy/overlays/...) in Go, with the kustomize library that kubectl embeds, and
// answers the questions the tests of the manifests ask: which objects, which
// containers, which RBAC rules allow what, and which permissions the requests
// of a run (Calls, from the API server's audit log) used, or were refused
// (Unused, Problems). The unit tests in package deploy and the end-to-end tests
// (server-side dry run against the sandbox's API server, the suite's RBAC
// coverage) use it; no program does, so kustomize never reaches Vigil's
// binaries.
package deploytest
