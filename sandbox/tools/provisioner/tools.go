//go:build tools

// Package tools pins the upstream CSI external-provisioner for the Vigil
// sandbox; see ../pins.env.
package tools

import _ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
