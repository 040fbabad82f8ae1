// Package client is the Go client of the datapath volume server, used by the
// manager (CSI controller service, node health) and by engine-nodes (I/O,
// heartbeats).
//
// Every call has a per-attempt timeout and is retried with backoff on transport
// failures (gRPC Unavailable). Reads and metadata calls (NodeGrants and Nodes
// among them) are also retried when an attempt times out. Writes, flushes,
// grants, fences (Fence and FenceNode), releases and Leave are retried only on
// Unavailable, and a write always with the epoch the caller passed: the
// client never changes an epoch, so if the volume was fenced or re-granted in
// between, the retry is refused with ErrFenced and the client returns that at
// once. A write is therefore never retried across an epoch change. A write's
// payload is handed to gRPC without a copy; WriteAt returns only once gRPC has
// let go of it, so the caller may reuse its buffer even after a failed write.
// Errors satisfy errors.Is against the datapath sentinels.
//
// WriteAt goes over the datapath's bulk channel (plain TCP beside gRPC on the
// same address, binary frames, several writes in flight on each of two
// connections; see the datapath package doc) unless WithBulk(false). The retry
// rules are the same: a failed bulk connection counts as Unavailable, a
// timeout or a refusal is final. The request is written to the socket before
// WriteAt waits for the answer, so the caller's buffer is free once WriteAt
// returns here too. A server that does not answer the bulk hello gets writes
// over gRPC.
//
// Writes are ordered on both channels: each carries the generation of its
// (volume, node, epoch)'s write session, which the server keeps for both. A
// write left without an answer (its timeout, the caller's context, a lost
// connection) makes the next write of that volume open a new generation
// first, so when the caller sends it again, the first copy, if it still
// arrives, is refused by the server (ErrStaleSession) instead of landing
// after the writes that follow. A write refused as stale wrote nothing and is
// sent again at once under a new generation. The client never sends a write
// the server could apply out of order: a server that answers neither the
// bulk hello nor OpenWriteSession (older than write sessions over gRPC) gets
// none, and WriteAt returns ErrServerTooOld.
//
// Every write carries the member epoch of the volume's replica set as the
// client last read it from the group's leader, before its first write to
// the volume (replicas.go). A server that refuses the member epoch as
// stale (ErrStaleMemberEpoch) wrote nothing; the client reads the volume
// again and sends the write once more, and a second refusal is the
// write's error (TestClient_WriteAt_StaleTwiceIsTheError). A volume of
// more than one copy is written and flushed on every in-sync replica at
// once, acknowledged by the ack rule (ackrule.go, replicated.go;
// TestReplicatedWrite, TestClient_Group_ReplicatedWrite_NoQuorumFailsCleanly,
// TestClient_Group_ReplicatedWrite_FencedNeverAcked).
//
// Each client presents one identity's token: the controller's (the manager,
// the CSI controller) or one node's engine's; the server refuses with
// ErrPermissionDenied whatever that identity may not do (an engine granting,
// or acting as another node). The token is Dial's argument, or a file
// (WithTokenFile) read again when it changes, for projected ServiceAccount
// tokens that the kubelet rotates; bulk connections opened with an older token
// are replaced. With a CA (WithCAFile, WithRootCAs) the client speaks TLS on
// both channels and verifies the server's certificate for the address's host;
// without one it speaks plaintext only to a loopback address, or anywhere with
// WithInsecure.
//
// The datapath's control state lives in a Raft group of servers, and only its
// leader changes it. Given the group's other servers (WithServers), the client
// sends creates, deletes, grants, fences, releases and Leave to the leader it
// knows, and when a server refuses as not the leader (ErrNotLeader, which
// names the leader's address) or does not answer, it follows to the leader
// named, or the next server after a pause, at most twice per server and a
// couple of times more per call (leader.go;
// TestClient_Group_FollowerRefusesWithTheLeaderAndTheClientFindsIt, which
// also stops the leader). Each volume's data is on one server, its holder:
// a volume's reads, writes (both channels), flushes, write sessions and
// reads of the volume (GetVolume, Attachments, Connectivity of a volume,
// ClearFailure) go to the holder the client knows, and when a server refuses
// as not the holder (ErrNotHolder, naming the holder's address) the client
// sends that volume's calls to the holder from then on, at once, at most
// twice per call, and opens the volume's write sessions afresh there
// (holder.go; TestClient_Group_IOGoesToTheHolder, which also stops the
// holder: its volumes' I/O fails within the retries with an error that
// says the volume is unavailable and names its holder, and the other
// volumes' goes on). Heartbeat goes to every server (one that takes
// it is enough); NodeGrants and FailedVolumes ask every server, each of
// which reports the volumes it holds, and fail unless all answer, so a
// server that does not answer never makes a node's live grant look absent;
// ServerNodes returns the Nodes report of each server that answers, and
// GroupNodeGrants a node's rows from the servers that answer with the
// volumes of those that do not, as the leader places them (fanout.go,
// grants_group.go); GroupStatus asks every server for the group, marking
// those that do not answer unreachable, with the volumes' holders from the
// leader (group_status.go). Everything else stays with Dial's address.
package client
