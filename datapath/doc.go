// Package datapath is Vigil's volume server, the "array": it stores volume data,
// keeps the attachment table that gives each ReadWriteOnce volume at most one
// writer node under a monotonically increasing epoch, fences nodes so that a
// zombie writer is refused, and records I/O and heartbeats for connectivity
// checks. It leaves Kubernetes, CSI (package datapath/csi) and the decision to
// fence (package controller) to others; the Go client is datapath/client.
//
// # Storage
//
// A data directory holds datapath.db (go.etcd.io/bbolt: volume records, the
// name index and the attachment table, see meta.go) and volumes/<id>.img, one
// sparse file per volume, created with the volume's full size (truncate) so it
// takes disk space only where written. A volume file is created and synced
// before the record naming it is committed; a delete commits first and removes
// the file after; files no record names are removed at start.
//
// # Epochs and fencing
//
// Each volume has an epoch counter, persisted with every change. Grant gives a
// node the next epoch (for RWO only while no other node holds a live grant);
// Fence moves the volume to the next epoch and records the node as fenced;
// Release marks the node's grant released. Every read, write and flush carries
// (node, epoch) and is accepted only if the node's row is a live grant with
// exactly that epoch; otherwise it gets ErrFenced and touches nothing. I/O
// holds the volume's RWMutex for reading across the check and the file access;
// Grant, Fence, Release and Delete hold it for writing and commit to bbolt
// (fsync) before returning; concurrent grants and fences of different volumes
// share transactions (group commit, commit.go), so fencing a dead node from
// many volumes costs a few fsyncs, not one pair per volume. So when Fence returns, no write from the fenced
// node is in flight and none can land later, and a restart never forgets the
// fence (TestStore_Fence_NoWriteLandsAfterFence, the SIGKILL crash test).
// Flush checks the epoch under the lock and syncs outside it: a flush writes
// nothing new, so a fence need not wait for the disk.
//
// Last I/O per (volume, node) and last heartbeat per node are kept in memory
// only (they describe the live connection to this server process); after a
// restart a node counts as connected once it heartbeats or does I/O again.
//
// # Protocol
//
// gRPC over HTTP/2 (google.golang.org/grpc), service vigil.datapath.v1.Datapath,
// with no protobuf code generation: the messages and their binary encoding are
// hand-written in datapath/internal/wire (length-prefixed fields, strict
// decoding with limits) and carried by a custom codec ("vigil-dp") that both
// sides force; the service is a hand-written grpc.ServiceDesc (service.go).
// This keeps protoc out of the build and lets a write's payload go to the
// transport without an extra copy. Errors travel as gRPC status codes plus an
// ErrorInfo reason (status.go), so the client returns errors that satisfy
// errors.Is against the sentinels in errors.go. Every call must carry gRPC
// metadata "authorization: Bearer <token>" with the shared token read from a
// file; the server compares SHA-256 digests in constant time and answers
// Unauthenticated otherwise, before decoding the request.
//
// `vigil-manager datapath serve --listen ADDR --data-dir DIR --token-file F`
// runs the server (default 127.0.0.1:9600, vigil.DefaultDatapathAddress). On
// SIGTERM or SIGINT it stops accepting calls, lets calls in progress finish,
// flushes every volume (fdatasync) and closes the database.
// `vigil-manager datapath status` prints a running server's volumes and
// attachment tables.
//
// # Performance
//
// Benchmarks live in datapath/client (go test -run '^$' -bench . ./datapath/client/):
// sequential 1 MiB writes over loopback against the same writes into a local
// file (metric "ratio", with the process CPU per MiB of each path), 4 KiB
// random-write IOPS with and without a flush per write, and Fence latency
// (p50, p99) while four nodes write to the same volume. A write's payload is
// not copied on the client (the codec hands the caller's slice to gRPC) nor on
// the server (pwritev straight from gRPC's receive buffers); what remains is
// the socket's two kernel copies and gRPC's HTTP/2 framing, which is why a
// loopback write costs several times the CPU of a local file write.
package datapath
