//go:build tools

// Package tools pins the Kubernetes binaries of the Vigil sandbox (the control
// plane, and the kubelet and kube-proxy of its real nodes); see ../pins.env.
// Every staging module is replaced by its published version.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
