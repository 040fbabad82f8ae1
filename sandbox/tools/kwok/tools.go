//go:build tools

// Package tools pins kwok and kwokctl for the Vigil sandbox; see ../pins.env.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwokctl"
)
