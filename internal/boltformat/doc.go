// Package boltformat records and checks the on-disk format version of Vigil's
// bbolt files (the datapath's datapath.db, an engine's journal.db). A file
// keeps its version in its meta bucket, under formatVersion, as a decimal
// number. Format.Check, called in the first write transaction after the file
// is opened and before anything else touches it, records the binary's version
// in a new file; takes a file without a version (written before versions were
// recorded) as version 1; brings an older version up to the binary's with the
// format's migrations, in that same transaction; and refuses a version newer
// than the binary knows with ErrTooNew, naming the file, its version and the
// highest one supported, having changed nothing. It leaves the meaning of
// each version, and the migrations, to the package that owns the file.
package boltformat
