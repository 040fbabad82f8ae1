// Package powerfs is test tooling, not shipped behaviour: a FUSE file system
// that forgets every write not yet fsynced when its process dies, so a test
// can cut the power under a program instead of only killing the program. A
// SIGKILL leaves the host's page cache in place, so a program that never
// calls fsync loses nothing when it is killed; under this layer it does.
// Jepsen's LazyFS is the model.
//
// How it is built. The layer is a passthrough (go-fuse's loopback node,
// embedded) over a backing directory. For each regular file it keeps, in its
// own memory, what happened since the file's last fsync or fdatasync: the
// written pages, merged over the backing file for reads; truncations (the
// backing bytes past the cut read as zeros); the size a fallocate gave the
// file. An fsync or fdatasync, and every write on a file opened O_SYNC or
// O_DSYNC, applies all of it to the backing file and syncs that. SIGKILL of
// the layer's process is the power cut: the memory is gone, the backing
// directory holds exactly what was synced, and a new layer mounted on it
// shows that. The kernel sends every read and write to the layer (no
// passthrough, no writeback cache); a shared read-only mmap, which bbolt
// uses, reads through it like read(2). fallocate reserves the blocks on the
// backing file at once (so a full disk is still reported) while the size it
// gives stays pending; punching holes, zeroing ranges, O_TMPFILE and
// copy_file_range are refused, and the kernel falls back to plain writes for
// the last.
//
// Namespace operations (create, mkdir, rename, link, unlink, chmod, utimes)
// go to the backing directory at once and survive the cut, as on a file
// system that commits its metadata journal synchronously. So a file created
// and written but not synced is there after the cut, empty; a program that
// relies on a directory fsync to keep a new name is not tested by this layer.
// A file whose last name is removed loses what it had pending.
//
// A layer runs as its own process: `vigil-sandbox powerfs --backing DIR
// MOUNTPOINT` (hidden), or powerfstest.Start inside a test binary. It needs
// root and /dev/fuse. Detach unmounts the dead mount a cut leaves behind
// (umount -l). The tests in this package prove the model: fsynced data
// survives a cut and a remount and unsynced data does not
// (TestLayer_Cut_KeepsSyncedDropsUnsynced); every transaction bbolt
// acknowledged survives a cut mid-stream (TestLayer_Bolt_CommittedSurviveCut)
// while the same writer with fdatasync skipped loses them
// (TestLayer_Bolt_NoSyncLosesCommits).
package powerfs
