//go:build tools

// Package tools pins the upstream CSI external-attacher for the Vigil sandbox;
// see ../pins.env.
package tools

import _ "github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher"
