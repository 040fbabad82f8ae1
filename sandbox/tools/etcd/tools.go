//go:build tools

// Package tools pins etcd for the Vigil sandbox; see ../pins.env.
package tools

import _ "go.etcd.io/etcd/server/v3"
