//go:build tools

// Package tools pins the Kubernetes control plane for the Vigil sandbox; see
// ../pins.env. Every staging module is replaced by its published version.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
