// Package datapath is Vigil's volume server, the "array": it stores volume data,
// keeps the attachment table that gives each ReadWriteOnce volume at most one
// writer node under a monotonically increasing epoch, fences nodes so that a zombie
// writer is refused, and records I/O and heartbeats for connectivity checks.
package datapath
