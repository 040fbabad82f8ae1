// Package e2e holds Vigil's end-to-end tests. They run against one real local
// cluster of package sandbox (3 nodes, brought up once by TestMain; needs root and
// the binaries of `make testbin`) and show, with a timeline, what Kubernetes does
// when a node loses power or its network.
package e2e
