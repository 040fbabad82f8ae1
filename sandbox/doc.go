// Package sandbox runs a real local Kubernetes control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler via kwokctl's binary runtime) with one kwok
// process per simulated node acting as that node's kubelet, so that stopping it is a
// power cut. It is used by the end-to-end tests and by bin/vigil-sandbox.
package sandbox
