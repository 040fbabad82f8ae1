// Package manager is the vigil-manager command line: `run` (controllers, API, UI,
// metrics, leader election), `settings`, `csi serve`, `certs ensure` (the
// install's certificates and API token, package pki) and inspection commands.
// It also holds the command line of vigil-datapath (DatapathApp: `serve`,
// `status`, `clear-failure`), whose flags for reaching the datapath it shares;
// `vigil-manager datapath …` is that binary's deprecated alias for one release.
// It is the place where concrete types from settings, datapath and controller are
// wired together; cmd/vigil-manager only calls App().Run.
package manager
