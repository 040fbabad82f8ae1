// Package manager is the vigil-manager command line: `run` (controllers, API, UI,
// metrics, leader election), `settings`, `datapath serve`, `certs ensure` (the
// install's certificates and API token, package pki) and inspection commands.
// It is the place where concrete types from settings, datapath and controller are
// wired together; cmd/vigil-manager only calls App().Run.
package manager
