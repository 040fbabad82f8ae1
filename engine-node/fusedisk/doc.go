// Package fusedisk serves one regular file, "disk", from a FUSE filesystem whose
// reads, writes and fsyncs go to a Backend (for Vigil: the datapath, bound to a
// volume, a node and an epoch). The file is what a loop device is attached to, so
// the kernel sees a real block device whose every sector lives on the datapath.
//
// The package owns the FUSE connection and the mapping of backend errors to
// errno: every backend failure is EIO, so a refused (fenced) write fails in the
// kernel and reaches the application as an I/O error. It knows nothing about
// volumes, epochs or loop devices; callers own those.
//
// It answers the kernel's requests with its own small loop (wire.go), using
// go-fuse's wire structs only: a connection outlives the process serving it
// when another process (package fdkeeper) holds a descriptor of it, and a
// successor serves it on with Adopt. The kernel sends INIT once per
// connection, so what it negotiated travels as Meta; node ids are fixed (root
// 1, disk 2) and file handles carry nothing, so the successor needs no other
// state. After adopting, it asks the kernel (FUSE_NOTIFY_RESEND, Linux 6.9) to
// send again what the dead server had read but not answered: block reads,
// writes and flushes are idempotent under one grant. Stop drains (every
// request read is answered) and leaves the mount in place. The file is opened
// with direct I/O and parallel direct writes, asynchronous direct I/O is
// negotiated, and a request carries up to 1 MiB.
// TestDisk_Handover_WriterSeesNoError proves that a writer in its own mount
// namespace sees no error across a SIGKILL and a SIGTERM of the server.
package fusedisk
