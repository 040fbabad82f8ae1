// Package controller holds Vigil's reconcilers. Today that is node health and the
// pod reaper (node_health.go, pod_reaper.go, sharing one queue loop in
// controller.go); VolumeAttachment recovery and crash-loop handling join later.
//
// Each reconciler reads a snapshot from shared informers (snapshot.go), calls a
// pure decide function with the settings and the clock passed in (decide.go:
// DESIGN.md's decision table, tested as a full cross product against an
// independent oracle), and executes the resulting actions, each with a UID
// precondition, a Kubernetes Event on the pod and on the node, and a Prometheus
// metric. Informers keep only what the decisions read (transform.go,
// pod_cache.go), so tens of thousands of pods fit in a small manager. Only the
// holder of a coordination.k8s.io Lease acts (leader.go).
//
// The package declares the small interfaces it needs and leaves their
// implementation to others: SettingsReader (implemented by *settings.Settings)
// and FenceProver (implemented with the datapath; without one the fast trigger
// fires only on the proofs Kubernetes gives: a deleted node or the out-of-service
// taint). The end-to-end proof in a real cluster lives in test/e2e.
package controller
