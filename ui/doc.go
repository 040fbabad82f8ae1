// Package ui holds the web UI served by vigil-manager: the settings page and the
// recoveries view, as static assets embedded with go:embed. (Work to come.)
package ui
