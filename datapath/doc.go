// Package datapath is Vigil's volume server, the "array": it stores volume data,
// keeps the attachment table that gives each ReadWriteOnce volume at most one
// writer node under a monotonically increasing epoch, fences nodes so that a
// zombie writer is refused (one volume, or every volume of a dead node), and
// records I/O, heartbeats and announced graceful stops for connectivity
// checks. Every caller proves who it is, and each identity makes only its own
// calls: the controller grants and fences, an engine does I/O as its own node.
// It leaves Kubernetes (but for TokenReview, in datapath/tokenreview), CSI
// (package datapath/csi) and the decision to fence (package controller) to
// others; the Go client is datapath/client.
//
// # Storage
//
// A data directory holds datapath.db (go.etcd.io/bbolt: volume records, the
// name index, the attachment table, the graceful stops nodes announced and
// the failed volumes, see meta.go) and volumes/<id>.img, one
// file per volume, its full size reserved on disk at creation (fallocate), or
// a thin file when the store over-provisions. A volume file is created and
// synced (file and directory) before the record naming it is committed; a
// delete commits first and removes the file after; files no record names are
// removed at start. None of this slow work holds the store-wide lock that
// every I/O takes for reading: creates and deletes take it only to reserve a
// name, an id and capacity, and to publish or forget the volume, so a volume
// is visible only once durable, a create of a name waits for a create or
// delete of it in flight, and I/O goes on while 50 volumes are provisioned
// (provision.go; TestStore_CreateVolume_IOGoesOnWhileTheFileIsMade,
// TestStore_DeleteVolume_CreateOfTheNameWaits,
// TestStore_CreateVolume_InFlightCountsAgainstCapacity; a crash at each step
// leaves a directory that opens cleanly: TestStore_Provisioning_CrashAtEachStep;
// BenchmarkStore_IOWhileProvisioning measures the stall). datapath.db
// records its on-disk format version (meta.go), and Open refuses a newer one
// than this binary knows, naming the file and both versions, before touching
// anything (TestStore_Open_NewerFormatRefused; a file written before versions
// were recorded opens as version 1: TestStore_Open_V1FileFromBeforeVersions).
// The store
// touches a data file only through the File interface (file.go), so tests can
// put a fault-injecting layer under it (datapathtest.Faults).
//
// # The control group
//
// `vigil-datapath serve` opens the Store with a Control (control.go): the
// volumes, the attachment tables with their epochs and the announced stops
// then live in a Raft group (datapath/raftstate; a lone server is a
// one-member group), and datapath.db keeps only the failed volumes (format
// version 2). Every create, delete, grant, fence, FenceNode, release and
// leave is a command the group commits by a majority, with the rules of
// AttachTable, and it is reported done only once the server that holds the
// volume's data applied it: the apply refreshes that server's copy of the
// volume's table under the volume's write lock, so everything said below of
// a fence's commit holds of the group's (TestStoreControl_FenceReturnsOnlyOnceApplied,
// TestStoreControl_FenceNode_NoWriteLandsAfterFence,
// TestStoreControl_ChangesGoThroughTheGroupAndSurviveRestart). When that
// server is the leader, the call returns after its apply; when it is another
// server, the leader answers with the log entry and that server's address,
// and the Go client asks it (WaitApplied, any authenticated caller: an
// engine's own Release is confirmed too)
// before it reports the change done; a server that does not confirm within
// the bound (client.WithApplyWait, 5 s) makes the call fail with
// ErrNotApplied (gRPC Unavailable, reason NOT_APPLIED) naming it, the change
// committed but not done (control.go says why this is safe, and why the old
// way - a server changed only the volumes it held - left every volume of a
// former leader unfenceable; TestClient_Group_FenceOfAFollowersVolume_NoWriteLandsAfter,
// TestClient_Group_OldLeadersVolumesChangeAfterALeaderChange,
// TestClient_Group_HolderThatDoesNotApply_NothingReportedDone). A client
// that does not confirm still gets ErrHeldElsewhere for such a volume. The
// data path reads that copy, never the group. The group runs on hashicorp/raft
// v1.8.0 with raft-boltdb/v2 rather than go.etcd.io/raft this release: its
// one known flaw (a follower may commit an uncommitted entry of a former
// leader) is caught by raftstate's guard, which stops the server with
// ErrDiverged instead of answering, and porcupine checks the group's
// grants and fences for linearizability (see package raftstate). A data
// directory of the release that kept the control state in datapath.db is
// imported at the first Open with a Control, epochs unchanged, then its
// datapath.db migrated to version 2, which that release refuses
// (TestStoreControl_UpgradeFromTheBboltRelease, on testdata/release-bbolt).
// Each volume's data is on one server of the group, its holder, which alone
// serves its reads, writes, flushes and write sessions (on both channels)
// and the reads of the volume (GetVolume, Attachments, Connectivity of a
// volume, ClearFailure): another server refuses them with ErrNotHolder
// (gRPC FailedPrecondition, reason NOT_HOLDER) before reading or writing
// anything, naming the holder's datapath address in the ErrorInfo's
// metadata (HolderAddressKey) and, on the bulk channel, as the first line of
// the message (holder.go; TestClient_Group_IOGoesToTheHolder).
// Data files no volume of the group names are logged at start and kept
// until they are AbandonedAfter (10 min) old; then the leader removes its
// own, but only once its applied state is settled (Control.Settled), no
// volume names them, and the group committed each as abandoned
// (Control.AbandonFile), which it refuses for a file a volume names and
// after which it refuses a create naming the file: a create committed
// during the sweep is first or fails (abandoned.go;
// TestStore_RemoveAbandoned_OldUnnamedFilesOnly,
// TestStore_RemoveAbandoned_AfterARestart,
// TestStore_RemoveAbandoned_NotSettledKeepsAll,
// TestStore_RemoveAbandoned_CreateCommitsDuringTheSweep); a follower keeps
// its own until it leads. The data file of a replica the group moved to
// another server is removed by its server, follower or leader, as it
// applies the move, but never before it has caught up since it started
// (abandoned.go; TestMovedAwayKeep, TestStoreGroup_ReplicaMovedAway,
// TestStoreGroup_ReplicaMovedAwayAndBack_KeepsItsFile). A create names the
// server that holds the new volume's data (placement.go): the Go client
// given the servers takes the one with the most free capacity, has it make
// the data file (PrepareVolume), commits the create at the leader naming it
// (CreatePlacedVolume) and confirms that server applied it, so no volume is
// committed whose file is not durable on its server
// (TestClient_Group_CreatePlacesOnTheServerWithMostFreeSpace,
// TestClient_Group_CreateBadInputAndNoSpace,
// TestStore_PlacedCreate_PreparedFileAndBadInput); a prepared file whose
// create is never committed keeps its size promised for PrepareHold and is
// then one of those files. A Store without a
// Control keeps all of it in datapath.db as described below; the package's
// other tests use it so.
//
// # Replicated volumes: the safety argument
//
// The control group records each volume's replica set (replicarules.go):
// R copies on R distinct servers, the in-sync subset, and a member epoch
// that every committed change of either moves on and nothing moves back.
// A change is decided at a member epoch and refused at any other
// (ErrStaleMemberEpoch), and refused when fewer than WriteQuorum(R) =
// ⌈(R+1)/2⌉ replicas would stay in sync (ErrReplicaQuorum); TestReplicaSet
// is the rules' specification, TestFSM_ReplicaSet_CommittedChanges and the
// porcupine check in datapath/raftstate prove the group applies them. The
// server refuses a write at another member epoch than the one it applied
// for the volume, after the (node, epoch) check and before writing
// anything, with ErrStaleMemberEpoch (gRPC Aborted, reason
// STALE_MEMBER_EPOCH, a bulk code of its own: WriteAtMember,
// TestStoreControl_WriteAtAStaleMemberEpochRefused,
// TestBulkCode_StaleMemberEpochHasItsOwnCode). Both channels carry the
// writer's member epoch, absent meaning 0, where a single copy stays for
// good, so clients and servers from before member epochs work with these
// both ways (wire.BulkRequest, wire.WriteRequest,
// TestServer_MemberEpochOnBothChannels). Every replica of a volume opens
// its data file and serves the writer's writes, flushes and write sessions
// with these checks from its own applied state; a write at a newer member
// epoch waits up to MemberEpochWait for this server to apply it; a replica
// out of sync refuses reads with ErrReplicaNotInSync naming the in-sync
// replicas (replicaio.go, TestStoreGroup_ReplicasTakeCheckedWrites); a
// replica's server started again answers none of its I/O before it has
// caught up, so a fence committed while it was down comes before any write
// (caughtup.go, TestStoreGroup_ReplicaRestart_FenceWhileDownAppliedFirst). A
// volume with R replicas is made by client.CreateReplicated
// (replicacreate.go, TestClient_CreateReplicated), and a change of it is
// confirmed by WriteQuorum(R) of its replicas (point 3 below,
// TestClient_Group_ReplicatedChange_ConfirmedByAMajority). The engine's
// client does points 1 and 2: it sends each write and flush to every
// in-sync replica and acknowledges it by the ack rule, taking a late
// replica out of sync at the leader first (MarkReplicaOutOfSync, as the
// writer's node; client/ackrule.go, client/replicated.go; TestReplicatedWrite,
// TestClient_Group_ReplicatedWrite_AReplicaStops,
// TestClient_Group_ReplicatedWrite_NoQuorumFailsCleanly), and then sending
// the write again at the new member epoch to the replicas still in sync,
// so that it is in their dirty-region maps, before acknowledging it
// (TestReplicatedWrite_SentAgainBeforeTheAck,
// TestClient_Group_ReplicatedWrite_MissedWritesAreInTheDirtyMaps). The CSI
// controller creates such volumes (a StorageClass's replicas, else the
// setting default-replica-count), and reads go to the holder, which is
// always in sync. While a replica is out of sync, every in-sync replica
// keeps a dirty-region map of it (4 KiB regions), each write's regions
// marked and synced in its file before the write (dirtymap.go,
// dirtyfile.go, dirtytrack.go, whose comment argues when a map may start
// empty; the table TestDecideDirty is its specification;
// TestStoreGroup_DirtyRegionMaps reads the file after each acknowledged
// write; a torn file is all dirty, never clean:
// TestDirtyFile_TornOrGarbledIsAllDirty, TestStore_LoadDirty_AtStart);
// Store.DirtyRegions reads it, over gRPC too (DirtyRegions, for the
// controller and for the writer's node at its live grant's epoch:
// TestStoreGroup_DirtyRegionMaps), and the copy that uses it is not built yet
// (docs/architecture.md, "Replicated volumes"):
//
//  1. The writer's engine sends each write, with (node, attach epoch, member
//     epoch), to every replica; it is acknowledged only once on every
//     in-sync replica and on at least WriteQuorum(R) of them.
//  2. A replica that misses a write's deadline leaves the in-sync set only by
//     a committed change, before the write is acknowledged without it; the
//     floor makes a volume that lost a majority suspend, not shrink.
//  3. A fence returns only once committed and applied by WriteQuorum(R) of
//     the volume's replicas, each of which then refuses the fenced node.
//  4. Two sets of WriteQuorum(R) among R share a replica (2⌈(R+1)/2⌉ > R,
//     TestWriteQuorum), so every acknowledgement would need a replica that
//     refuses: a fenced node's write is never acknowledged. At most it lands
//     on a minority that had not applied the fence, and resync overwrites it.
//  5. A replica joins the in-sync set only by a committed change, having
//     applied every fence committed before it; a fence after it is on a
//     majority of the new set; writes carry the member epoch, so an older set
//     refuses them. The newest set is the only one that matters.
//  6. Reads come only from a replica in sync at the current member epoch.
//
// # A failed flush is never forgotten
//
// After fdatasync fails, the kernel may drop the pages it could not write and
// mark them clean, so a later fdatasync succeeds although acknowledged writes
// are gone. The first failed sync of a volume's file (a Flush, or the flush at
// Close) therefore marks the volume failed, in memory at once and in
// datapath.db (failed/<id>), and every later read, write and flush of it is
// refused with ErrVolumeFailed (gRPC DataLoss, reason VOLUME_FAILED), whose
// message says what failed, when, and that an operator must check the disk and
// the data and run ClearFailureCommand. A sync that starts after a failed one
// sees the mark instead of a success that proves nothing; syncs of one volume
// may run side by side, but the kernel reports a failed writeback to only one
// of them, so one that succeeds waits for those that overlapped it and then
// looks at the mark. FailedVolumes lists the failed volumes (the manager turns
// them into an Event and a gauge); ClearFailure, for the controller identity
// only, ends a failure (TestStore_Flush_FailureLatches,
// TestStore_Flush_OverlappingSyncSeesTheFailure,
// TestClient_FailedVolume_CrossesTheWire).
//
// # A power cut and the boot id
//
// A write is acknowledged once it is in the page cache of the datapath's
// machine; a Flush makes the writes acknowledged before it durable. A crash
// of the process (SIGKILL, OOM) loses nothing: the kernel keeps the page
// cache. A power cut of the machine loses every acknowledged write no flush
// covered, and the restarted server then answers the next Flush with success
// for its own, empty, page cache, so a file system above would take that
// flush as covering writes that are gone (ext4's journal gets a hole, and
// replay stops at it on the next mount, dropping every later transaction).
// So the server reports its machine's boot id (`vigil-datapath serve
// --boot-id-file`, default DefaultBootIDFile, read once at start; a file that
// cannot be read or holds anything but 1 to 64 letters, digits, '-' and '_'
// stops the start with an error naming it: TestReadBootID_BadFilesClearErrors)
// with every answer: the gRPC response header BootIDMetadataKey and the
// message of the bulk hello's answer (TestClient_BootID_ReportedOnBothChannels).
// A client asks for it per call with WithBootRecorder; a write or flush of
// a volume of several copies records the holder's boot alone, as its reads
// do (TestClient_Replicated_BootIsTheHolders). The engine keeps every
// acknowledged write until a flush by the same boot covers it, and sends
// again what another boot acknowledged before anything else goes out (see
// package enginenode, Replay). Older peers keep working: a client from before
// boot ids ignores the header and the hello's message, and a server from
// before them reports none, which the engine logs once per volume, since it
// then cannot tell a power cut from a restart.
//
// # Epochs and fencing
//
// Each volume has an epoch counter, persisted with every change. Grant gives a
// node the next epoch (for RWO only while no other node holds a live grant).
// A grant records its use (GrantUse, GrantAs): a filesystem writer is the only
// writer of any volume, RWX included, since ext4 mounted read-write on two nodes
// is corrupted, and a read-only grant's writes get ErrReadOnly
// (TestGrantConflict, TestStore_GrantAs_SecondFilesystemWriterRefused).
// Fence moves the volume to the next epoch and records the node as fenced;
// Release marks the node's grant released. Every read, write and flush carries
// (node, epoch) and is accepted only if the node's row is a live grant with
// exactly that epoch; otherwise it gets ErrFenced and touches nothing. I/O
// holds the volume's RWMutex for reading across the check and the file access;
// Grant, Fence, Release and Delete hold it for writing and commit to bbolt
// (fsync) before returning; concurrent grants and fences of different volumes
// share transactions (group commit, commit.go), so fencing a dead node from
// many volumes costs a few fsyncs, not one pair per volume. So when Fence
// returns, no write from the fenced node is in flight and none can land later,
// and a restart never forgets the fence (TestStore_Fence_NoWriteLandsAfterFence,
// the SIGKILL crash test, which kills the server only after it acknowledged
// flushed writes and fails if a round checked none; and the power-cut test,
// which runs the server on internal/powerfs and cuts it with the layer, so
// that what was not fsynced is gone: TestServer_PowerCut_LosesNoFlushedWrite). Flush checks the epoch
// under the lock and syncs outside it: a flush writes nothing new, so a fence
// need not wait for the disk.
//
// # Fencing a node
//
// The manager fences a dead node with one call. An index kept with the
// attachment tables (nodes.go: node -> the volumes where it has a row, and
// its number of live grants; changed under each volume's write lock, rebuilt
// at start) lets NodeGrants read a node's rows and FenceNode find its volumes
// without walking every volume: one node's 40 rows among 2,000 volumes cost
// the same as among 40. FenceNode fences the node on every volume where its
// grant is live, each exactly as Fence does (same lock, same commit, same
// guarantee: TestStore_FenceNode_NoWriteLandsAfterFence races writers against
// it over the store, TestClient_FenceNode_NoWriteLandsAfterFenceOverBulk over
// the bulk channel). It fences up to 256 volumes at once, so their commits
// share transactions, and returns when all are durable. Volumes where the node
// is already fenced or released are left alone, so a second call fences
// nothing and returns an empty list, and concurrent calls fence each volume
// once (TestStore_FenceNode_OnlyLiveGrantsOnceEach,
// TestStore_FenceNode_ConcurrentCallsFenceEachVolumeOnce). A grant given to
// the node while FenceNode runs is fenced too (it looks again while the node
// still has live grants, up to four passes). On a disk error it reports every
// failed volume; the others are fenced and durable, and calling again fences
// the rest. With the control group FenceNode is one committed entry for
// every volume of the node, whichever server holds each; the Go client
// returns the volumes whose servers confirmed they applied it, and
// ErrNotApplied naming each server that did not and its volumes, which are
// then not fenced as far as the caller knows
// (TestClient_Group_FenceNode_OneHolderDown). The datapath/fencebackend package wraps these calls as the controller's
// fence back end; fenceapi/fenceapitest's conformance suite runs against it over a real
// server.
//
// # Connectivity and graceful stops
//
// Last I/O per (volume, node) and last heartbeat per node are kept in memory
// only (they describe the live connection to this server process); after a
// restart a node counts as connected once it heartbeats or does I/O again.
// Nodes reports, on the server's clock and with the time the server started,
// every node that heartbeated or did I/O since then, every node that holds a
// live grant (so a node that died before a restart of the server is still
// listed, silent since the start, and still gets fenced), and every node with
// an announced stop (TestStore_Nodes_HeartbeatsIOLiveGrantsAndRestart). Leave
// is an engine's announcement that it stops on purpose (SIGTERM in a rolling
// update) and may be silent for a while: the server keeps it until it runs out
// (at most MaxLeave, 2 minutes; a longer one is cut, one that is not positive
// refused) or until the node's next heartbeat, and commits it to bbolt, so a
// restart of the datapath during a rolling update does not turn the stop into
// a failover (TestStore_Leave_ClampedPersistedAndClearedByHeartbeat). A
// heartbeat within LeaveSettle (1 s) of the announcement does not clear it: it
// may have been sent before the Leave and handled after
// (TestStore_Leave_HeartbeatWithinSettleDoesNotClear). With the control
// group the clear is committed in the background, one at a time per node, so
// the heartbeat does not wait for a Raft apply
// (TestStoreControl_HeartbeatDoesNotWaitForTheClearOfItsLeave). A crashed engine
// announces nothing, and its silence becomes a failover: its FUSE disks died
// with it.
//
// In a group each server keeps its own connectivity: a client given the
// group's servers heartbeats to every one of them, and the manager merges
// the Nodes reports of every server that answers (datapath/fencebackend), so
// a node is heard when any server heard it and one server down isolates no
// node.
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
// errors.Is against the sentinels in errors.go.
//
// # Identities and authorization
//
// The datapath trusts no node name from a request. Every call carries gRPC
// metadata "authorization: Bearer <token>" (the bulk channel: its hello), and
// an Authenticator turns the token into an Identity: the controller role (the
// manager, the CSI controller) or the engine of one node. Two kinds, usable
// together (Authenticators): StaticTokens, a tokens file for the sandbox and
// single-machine use with one token per role and per node ("controller
// TOKEN", "node NODE TOKEN"; tokens kept as SHA-256 digests, a bad line
// refused with its number: TestParseTokens_BadLinesNameTheLine), and
// datapath/tokenreview, where each caller presents a projected
// ServiceAccount token for the audience vigil-datapath, the API server
// answers a TokenReview, the ServiceAccount maps to a role by flags, and an
// engine's node is the one the API server names in the token's user extra
// authentication.kubernetes.io/node-name, never one a request names. A token
// that cannot be checked is refused (ErrAuthUnavailable), never let in, except
// on a connection where it was proved before: I/O must not depend on the API
// server, so such a connection keeps the identity its token proved on it, up
// to MaxBoundIdentity after the last proof and never past the token's expiry;
// a refusal of the token or the connection's end drops it. Nor does such a
// connection wait for a check that hangs (an API server starting again
// accepts connections before it answers, and heartbeats that waited on it
// stalled past the manager's connectivity-loss threshold): after
// BoundCheckPatience the call goes on with the proved identity and the check
// finishes in the background, its refusal applied when it arrives
// (conn_identity.go; TestBoundIdentities,
// TestBoundIdentities_SlowCheckDoesNotHoldTheCall,
// TestClient_APIServerStarting_HeartbeatsAndNodesDoNotWaitOnTokenReview,
// TestServer_Bulk_APIServerOutageKeepsTheConnection; end
// to end, TestAPIServerOutage_IOContinues in test/e2e stops kube-apiserver
// under writers on every node).
//
// Authorize (identity.go) is the whole decision, one table for both channels
// (TestAuthorize_Table is its specification): the controller creates,
// deletes, grants, fences (Fence, FenceNode), releases and reads every report
// (ListVolumes, Capacity, Connectivity, NodeGrants, Nodes, FailedVolumes) and
// clears a failed volume (ClearFailure), but never reads,
// writes, flushes, heartbeats or leaves as a node, so a bug in the manager
// cannot keep a dead node looking alive; an engine reads, writes (opening write sessions), flushes,
// heartbeats and leaves as its own node only, releases its own grants (after
// a cleanup) and lists its own grants, and reads one volume at a time
// (GetVolume, Attachments: its stage path and gate), but never creates,
// deletes, grants or fences. Every other call is refused with
// ErrPermissionDenied (gRPC PermissionDenied, reason PERMISSION_DENIED), naming
// the identity, the method and both nodes, before the store is touched
// (TestClient_Identities_NodeACannotActAsNodeB, over gRPC and bulk). The
// fencing guarantees do not depend on identities: a fenced node's writes
// carry a stale epoch whatever its token.
//
// # TLS
//
// With WithTLS (ServerTLS loads a certificate and key and picks up replaced
// files) the server speaks TLS on its one port: it completes the handshake on
// every connection first (within the same 10 s as the first bytes), then tells
// bulk from gRPC by the first bytes inside TLS; ALPN says the same (h2 for
// gRPC, vigil-bulk/1 for bulk) and gRPC's client requires it. gRPC gets the
// secured connection and runs without credentials of its own
// (TestServer_TLS_HandshakeFirstForBothChannels). Clients verify the server
// against a CA (datapath/client WithCAFile) and refuse plaintext to an address
// off loopback unless told WithInsecure; `datapath serve` refuses to listen off
// loopback without TLS unless --insecure. Over TLS the bulk channel reads
// payloads into a pooled buffer (splice needs the plaintext socket), and the
// client gathers a request's TLS records (16 KiB each, each a socket write of
// its own in crypto/tls) into 64 KiB socket writes. A request's header shares
// its first record with the payload and records are full-size from a
// connection's first byte, so a request takes the fewest records its size
// allows (TestBulkConn_Send_TLSRecordsFull counts them on the wire). What TLS
// still costs on top of plaintext is AES-GCM on both ends (sealing and
// opening together cost about as much CPU per MiB as all of plaintext's
// work: BenchmarkTLS_RecordCrypto), a copy out of crypto/tls's record buffer,
// and a socket read instead of a splice.
//
// FuzzServer_Request sends arbitrary requests to every method as arbitrary
// callers (the controller, the engines of three nodes, a wrong token, none, a
// malformed header), on a fresh store each time: a call without a valid token
// must be refused as unauthenticated and change nothing; a call the caller may
// not make (its own statement of the table) must be refused as permission
// denied, name both nodes and change nothing; any other refusal must be a
// known error that changes nothing; and a call that succeeds must have
// exactly its documented effect.
//
// # Bulk channel
//
// Writes go over a second kind of connection to the same address: a plain TCP
// connection with fixed binary frames (datapath/internal/wire, bulk.go). The
// server reads the first 8 bytes of every accepted connection (mux.go, in a
// goroutine per connection, 10 s limit): "VGLBULK2" makes it a bulk
// connection (the first version, "VGLBULK1", is refused with a message that
// says to upgrade the engine, in that version's own layout:
// TestServer_Bulk_Version1Refused), anything else (the HTTP/2 preface "PRI * HT...") goes to gRPC
// with those bytes put back, so there is one port and nothing to configure.
// A bulk connection starts with a hello carrying the caller's token, taken to
// the same Authenticator; a refused token is answered UNAUTHENTICATED and the
// connection closed. Every write is authorized like a gRPC Write (an engine
// as its own node only; a refusal closes the connection), and the token is
// proved again every 10 s, so a connection does not outlive a revoked or
// expired token (TestServer_Bulk_ProvesTheTokenAgain). Then each request is a
// 48-byte header (op, lengths of volume id, node and payload, request id,
// epoch, offset, write session generation), the volume id, the node and the
// payload; each response is the request id, a code, a generation and a
// message, the code naming the same sentinel as the gRPC ErrorInfo reason
// (BulkError). Requests carry ids, so a client keeps
// several in flight on each of its two connections and answers come in any
// order. The server receives a request whole before it touches the store: a
// payload of 64 KiB to 1 MiB is spliced from the socket into a pipe
// (splice_linux.go), smaller or larger ones are read into a pooled buffer;
// then it calls the same write path as gRPC (volume read lock, (node, epoch)
// check, ErrFenced with nothing written) and moves the pipe's pages into the
// file with a second splice, so the payload never passes through user space on
// the server. A slow or dead client therefore never holds a volume lock, and
// the fencing guarantees above hold for both channels (the fence race test
// runs over each). A malformed header (unknown op, reserved bytes set,
// oversize names or payload) is answered INVALID_ARGUMENT and the connection
// closed; a truncated request is dropped with the connection, nothing written.
// On Stop the server stops reading bulk requests, lets those in progress be
// answered within the grace period, then closes the connections.
//
// # Every write is ordered
//
// Every write the server accepts is ordered by write sessions
// (writesession.go), on the bulk channel and over gRPC alike. A client that
// got no answer to a write cannot tell whether it is lost or only delayed: on
// a black-holed path TCP may deliver it after the client sent it again on
// another connection, after the retry succeeded and after ext4 wrote newer
// data to the same block. No fence happened, so the epoch check passes. So a
// write carries the generation of its (volume, node, epoch)'s write session;
// a session request (the bulk channel's op 2, or OpenWriteSession over gRPC)
// opens a new generation, which waits for the writes in progress under the
// older one; and the server applies a write only under the generation opened
// last, refusing any other, and one with no generation, with ErrStaleSession
// (nothing written). The server keeps one session per (volume, node) for both
// channels, so a generation opened on one ends the older ones on both. The
// client opens a new generation before anything else once a write went
// unanswered, so the late copy is refused
// (TestClient_WriteAt_RetriedWriteNeverLandsAfterANewerOne over the bulk
// channel, through a proxy that holds one connection's request until after
// the retry and a newer write; TestClient_WriteAt_RetriedGRPCWriteNeverLandsAfterANewerOne
// over gRPC, where the proxy holds the write, cuts the client's side of the
// connection so that gRPC sends the write again on a new one, and delivers
// the first copy after a newer write). Sessions are soft state, one per
// (volume, node): a restart forgets them, and drops every connection with
// them; generations come from one counter seeded by the clock, so none is
// issued twice across restarts.
//
// Why gRPC writes carry sessions rather than being refused: gRPC is the path
// a client takes when the bulk channel is not answered, and refusing it would
// leave such a client with no way to write at all, where carrying the same
// session costs one map lookup and a read lock per write (the bulk channel
// already pays them; BenchmarkStore_WriteAt_Session measures them). One
// session table for both channels also means that the client need not wait
// for a particular channel to end a generation. The older, unordered gRPC
// Write of releases before this one is not served (gRPC answers
// Unimplemented); in the other direction, a current client that meets a
// server without OpenWriteSession sends it no write and returns
// client.ErrServerTooOld, which says to upgrade vigil-datapath
// (TestClient_WriteAt_OldServerGetsNoUnorderedWrite). Releases before this
// one already speak the bulk channel with sessions, so an engine upgraded
// before its datapath keeps writing over it.
//
// The client (datapath/client) sends WriteAt over the bulk channel unless
// WithBulk(false); everything else stays on gRPC. Its retry rules are gRPC's:
// a failed connection is retried with the caller's epoch (a write is never
// moved to a new epoch), a timeout or a refusal is not, except a refusal as
// stale, which is sent again at once under a new generation. A request left
// unanswered ends its generation (and on the bulk channel closes its
// connection, whose path may be black-holed): the next write of that volume,
// on either channel, opens a new generation first. A server that does not
// answer the bulk hello gets the write over gRPC, under the same sessions,
// and the client tries the bulk channel again a minute later.
//
// The server is its own binary, vigil-datapath (cmd/vigil-datapath; its
// command line is manager.DatapathApp, which `vigil-manager datapath` still
// runs as a deprecated alias for one release).
// `vigil-datapath serve --listen ADDR --data-dir DIR` with --token-file
// (a tokens file) and/or --controller-service-accounts and
// --engine-service-account (TokenReview), and --tls-cert-file with
// --tls-private-key-file, runs the server (default 127.0.0.1:9600,
// vigil.DefaultDatapathAddress). On
// SIGTERM or SIGINT it stops accepting calls, lets calls in progress finish,
// flushes every volume (fdatasync) and closes the database.
// `vigil-datapath status` prints a running server's volumes and
// attachment tables, its failed volumes, its nodes (last heartbeat and
// I/O, announced stops, live grants), and its control group's servers
// (Servers: each member as it reports itself at its own address: role, last
// contact with the leader, applied index; one that does not answer is
// unreachable), and the group's volumes with the server holding each
// (GroupVolumes) with their member epoch and recorded replica set, each
// replica in-sync, faulted (out of sync) or unreachable (-o json:
// .servers[] and .volumes[]); `vigil-datapath clear-failure
// VOLUME` clears a failed volume.
//
// # Performance
//
// Benchmarks live in datapath/client (go test -run '^$' -bench . ./datapath/client/):
// sequential 1 MiB writes over loopback against the same writes into a local
// file (metric "ratio", with the process CPU per MiB of each path), in
// plaintext and over TLS (",tls"), with the server in the benchmark's process
// or, given VIGIL_BENCH_SERVER_CPUS, in a process of its own pinned to those
// processors; what AES-GCM alone costs per 16 KiB record; 4 KiB
// random-write IOPS with and without a flush per write, over gRPC and over
// TLS, Fence latency (p50,
// p99) while four nodes write to the same volume (control=bbolt: a Store
// without a Control; control=raft: a one-member group, as serve runs it;
// control=raft3: three servers in one group on loopback, the leader holding
// the volume; control=raft3,holder=follower: a follower holding it, each
// fence the leader's commit and the follower's confirmation), FenceNode of a rack (50
// nodes with 40 volumes each, one call per node at once: 2,000 durable
// fences; BenchmarkClient_FenceNode_Group3 the same on three servers, the
// volumes spread over the three), the Nodes report of 500 nodes, and NodeGrants of one node among
// 2,000 volumes. BenchmarkStore_FenceNode_50Nodes in this package reports how
// many bbolt commits the rack's fences took, BenchmarkStore_WriteAt_Session
// what the write sessions' check costs a 4 KiB and a 1 MiB write;
// BenchmarkAuthenticator_CacheHit in datapath/tokenreview what a reviewed
// token costs each call. Over gRPC a write's
// payload is not copied on the client (the codec hands the caller's slice to
// gRPC) nor on the server (pwritev straight from gRPC's receive buffers), but
// HTTP/2 framing and two socket copies cost several times the CPU of a local
// file write; the bulk channel leaves one socket copy on the client (writev of
// header and payload) and a splice into the page cache on the server.
//
// On the 2-core development machine, shared with other builds (load
// average 6-9), 2,000 fences under writes each: with the leader holding the
// volume p50 6.7 ms, p99 49 ms; with a follower holding it p50 9.4 ms, p99
// 63 ms (at load 5: 6.3 and 53 ms against 2.7 and 35 ms). The rack on three
// servers: 84 ms per round, 23,700 fences/s.
//
//	go test -run '^$' -bench 'Fence_UnderWrites/control=raft3' -benchtime 2000x ./datapath/client/
//	go test -run '^$' -bench 'FenceNode_Group3' -benchtime 5x ./datapath/client/
//
// A replica out of sync costs an in-sync replica's 4 KiB write to a clean
// region the mark's fdatasync, 0.56-1.2 ms on that machine, and nothing
// measurable to a region already dirty (2.8-5.7 µs against 2.2-2.4 µs with
// every replica in sync, at load average 13-19):
//
//	go test -run '^$' -bench 'StoreGroup_WriteAt_DirtyMap' -benchtime 2000x -count 3 ./datapath/
package datapath
