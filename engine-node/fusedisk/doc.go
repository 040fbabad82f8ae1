// Package fusedisk serves one regular file, "disk", from a FUSE filesystem whose
// reads, writes and fsyncs go to a Backend (for Vigil: the datapath, bound to a
// volume, a node and an epoch). The file is what a loop device is attached to, so
// the kernel sees a real block device whose every sector lives on the datapath.
//
// The package owns the FUSE mount and the mapping of backend errors to errno: every
// backend failure is EIO, so a refused (fenced) write fails in the kernel and
// reaches the application as an I/O error. It knows nothing about volumes, epochs
// or loop devices; callers own those.
package fusedisk
