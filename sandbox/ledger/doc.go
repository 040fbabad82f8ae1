// Package ledger is the data check of the chaos suite: a writer that appends
// records to a file on a pod's volume and acknowledges each one in a ledger on
// the host only once fsync returned, and the reading side that compares the two.
//
// A record is one line, "vr1 POD-UID NODE SEQ UNIX-NANOS CRC\n", where CRC is the
// CRC-32 (IEEE, 8 hex digits) of everything before it; the time is taken before
// the write, so a record whose time is after the moment its node was fenced was
// necessarily written after the fence. Each pod writes its own file,
// records-POD-UID.log, at the root of its volume, so a replacement pod never
// touches the file of the pod it replaces. The ledger is a file on the host's
// filesystem, outside every sandbox mount, with one line "SEQ UNIX-NANOS\n" per
// acknowledged record; a node's processes share the host's filesystem, so a
// partition never cuts the writer off from its ledger, as an application's own
// memory of what it committed.
//
// The writer (Run, the hidden `vigil-sandbox writer` subcommand) never stops on
// an I/O error: a write or fsync that fails is not acknowledged; it closes the
// file and opens it again after a pause (an engine restart breaks open files
// on the old mount; in the host's namespace new opens work once the volume is
// served again), and the next record takes the next sequence number. A failed
// record may or may not be on the volume; only acknowledged ones must be.
//
// A writer runs in its node's mount namespace, the host's, unless started with
// --own-mount-namespace (EnterOwnMountNamespace): then, as a container, it has
// a mount namespace of its own, every mount private, with its volume's
// directory bound into it when it starts. A mount the host changes at that
// directory later (a dead FUSE mount replaced by a new one after an engine
// restart) is not seen: the writer keeps its file open and opens it again, by
// path, on the mount it started with, so a dead mount stays an error as it
// does for a container's process (TestWriter_OwnMountNamespace).
//
// ReadRecords parses a records file, skipping torn or garbled lines (the tail
// of a write cut by a power cut); Verify checks a ledger against the records
// found: every acknowledged record present (no lost write), and no record from
// a node during a span in which the datapath had that node fenced. Check
// judges a ledger alone, as every test that watches a writer does: whether it
// is gapless (each number from the first to the last acknowledged once, in
// order, no garbled line: no record failed) and the longest time it went
// without an acknowledgement while observed, the tail to the end of the
// observation included (TestCheck_Cases).
package ledger
