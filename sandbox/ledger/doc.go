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
// file and opens it again after a pause (an engine restart breaks open files on
// the old mount, new opens work once the volume is served again), and the next
// record takes the next sequence number. A failed record may or may not be on
// the volume; only acknowledged ones must be.
//
// ReadRecords parses a records file, skipping torn or garbled lines (the tail
// of a write cut by a power cut); Verify checks a ledger against the records
// found: every acknowledged record present (no lost write), and no record from
// a node during a span in which the datapath had that node fenced.
package ledger
