// Package enginenode is the per-node agent, vigil-engine-node: the CSI node
// service for the kubelet, heartbeats to the datapath, a bbolt journal of what
// is staged and published on this node, and the cleanup that runs while the
// node carries Vigil's fenced taint, with the gate that keeps a fenced volume
// from being staged again before that cleanup is done.
//
// # How a datapath volume becomes a local block device
//
// NodeStageVolume builds, per volume, the s3backer pattern:
//
//	datapath (volume, node, epoch)
//	  ↑ ReadAt / WriteAt / Flush, one request per FUSE request (≤ 1 MiB)
//	FUSE filesystem with one file, "disk" (package fusedisk), mounted at
//	  STATE_DIR/disks/<hash of volume id>/
//	  ↑ the kernel's loop driver (package loopdev: LOOP_CONFIGURE, autoclear,
//	    direct I/O when the kernel allows it)
//	/dev/loopN: a real block device
//	  ↑ ext4, made on first use (mkfs.ext4 only when blkid finds no signature)
//	mounted at the staging path (Filesystem mode; Block mode stops at /dev/loopN)
//
// NodePublishVolume bind-mounts the staging mount (Filesystem) or the loop device
// node (Block, onto a file) at the target path. NodeUnstageVolume flushes the
// loop device before it detaches it: a Block volume's pod may have written
// through the device's page cache without syncing, and the engine's own open
// descriptor means the pod's close was not the last one, so the kernel had
// not written those pages (loopdev's TestDevice_Detach_KeepsBufferedWrites;
// the upstream multiVolume suite of make conformance lost them before).
//
// The access mode is checked here too, with the controller's rule
// (datapath/csi.GrantUse): a multi-node writer mode with mount access is
// refused, since ext4 mounted read-write on two nodes is corrupted; a reader
// mode is staged read-only (ro,noload: not even the journal is replayed), never
// formatted, and published read-only (TestCheckStage_AccessModes,
// TestNodeServer_Stage_ReaderModeMountsReadOnly).
//
// Alternatives considered: NBD needs
// the nbd kernel module, which is not always loaded (and not in the sandbox);
// ublk needs io_uring and a newer userspace; a loop device over a local file
// would not carry the epoch. FUSE plus loop needs only /dev/fuse and
// /dev/loop-control, and every block I/O reaches the datapath with the epoch.
//
// # Fencing reaches the application
//
// The FUSE file is opened with direct I/O, so no write is acknowledged before the
// datapath accepted it. Once the datapath fences this node, every write and
// flush comes back datapath.ErrFenced; fusedisk turns it into EIO, the loop
// device fails the bio, and ext4 fails the application's write or fsync with an
// I/O error. Nothing reaches the datapath after the fence.
//
// A request the datapath does not answer at all (it restarts, a connection is
// lost) is different: it is sent again until --io-timeout (30 s), so a short
// datapath restart stalls the volume's I/O and fails none of it. ext4 takes an
// EIO on its journal as fatal, which would end every writer for a blip. Block
// reads, writes and flushes under one grant are idempotent; if the node was
// fenced meanwhile, the next attempt gets ErrFenced and ends there.
//
// A stack is bound to the epoch it was built for, for its whole life. The
// datapath gives a node a higher epoch only after it fenced or released that
// node's grant, so another node may have written the volume since; a stage
// with a higher epoch for a volume still staged here therefore takes the old
// stack down (unmount, loop device and FUSE disk detached, with every page
// they cached), passes the gate and builds a new one, which reads what the
// other node wrote. It refuses while targets are still published: their bind
// mounts keep the old filesystem alive until their pods end
// (TestNodeServer_Stage_AfterFenceMountsFresh, on the real datapath and
// two NodeServers, proves it down to an fsck-clean volume).
//
// # The journal and restarts
//
// Every stage and publish is journaled (bbolt, STATE_DIR/journal.db) in an
// in-progress phase before its first side effect and in its final phase after
// its last, with volume, epoch, paths, access type and the pod (from
// podInfoOnMount), and the boot id of the run that wrote it. The journal also
// keeps the node's boot id and its on-disk format version (1; a journal of a
// newer format is refused at open, naming the file and both versions:
// TestOpenJournal_NewerFormatRefused, TestOpenJournal_V1FileFromBeforeVersions,
// internal/boltformat). A record written is fsynced before the call returns,
// so it survives a power cut, not only a kill of the process
// (TestJournal_PowerCut_KeepsAcknowledgedRecords, on internal/powerfs). On
// start (Recover): after a reboot every entry of
// an earlier boot is taken down and forgotten, and only then is the new boot
// id recorded, so a cleanup that failed is retried by the next start
// (TestNodeServer_Recover_FailedRebootCleanupRetriedNextStart); after a restart,
// operations cut short are rolled back, staged volumes are served again, and
// FUSE disks or loop devices under the state directory that no entry explains
// are removed.
//
// A FUSE connection lives as long as any process holds its /dev/fuse
// descriptor, and the node's fd keeper (`vigil-engine-node fd-keeper`,
// package fdkeeper, --fd-keeper-socket) holds one per staged volume: the
// engine deposits it right after mounting the disk, with the negotiated
// connection and the epoch, and drops it after unmounting the disk. After a
// restart, a staged volume whose connection the keeper holds at the journaled
// epoch, and whose FUSE mount, loop device and staging mount are all still
// there, is adopted (fusedisk.Adopt with a fresh datapath backend at that
// epoch): nothing is torn down or rebuilt, the kernel's requests queued
// meanwhile are answered, those the dead engine had read but not answered are
// sent again (FUSE_NOTIFY_RESEND), and the pods' open files only stall for the
// restart (TestApp_Run_RestartKeepsVolumesServed: real engine processes, a
// real datapath, a writer in a mount namespace of its own, across a SIGKILL
// and a SIGTERM). Otherwise the volume takes the rebuild path: the dead layers
// are taken down and built anew with the recorded epoch, and published
// targets are bound again; open files on the old mounts then see EIO, as on a
// failed disk, while new opens through the target path work again. Every
// restart without a keeper (--fd-keeper-socket empty or unreachable) takes
// that path. On a kernel older than 6.9, which cannot resend, a request in
// flight at a SIGKILL never completes (a SIGTERM drains first); the engine
// logs it when it adopts. Connections the keeper holds for volumes no longer
// staged are dropped. The engine dials the keeper's socket for every request,
// so a keeper replaced on a drained node (docs/operations.md) takes the next
// stage's connection without an engine restart (TestKeeperUpgrade_DrainedNode).
//
// # Cleanup after a reap, and the gate
//
// FenceCleaner (fence_cleanup.go) reads this node's Node. While it carries
// vigil.io/fenced, decideCleanup, a pure function of the journal and the UIDs
// of the pods still bound here, picks every publish whose pod is gone or was
// replaced elsewhere (pod UID from podInfoOnMount, or from the kubelet's target
// path); those are unpublished, their stages unstaged and their grants released;
// once the journal is empty the taint is removed. A step that fails becomes a
// Warning Event on the Node and vigil_engine_cleanup_total{outcome="failed"},
// and the pass is retried with backoff; a publish for an unknown pod keeps the
// taint and says so in a Warning Event. As the NodeServer's Gate it refuses
// every stage until its first pass has read the Node (the CSI socket is served
// from the start, but whether the node is fenced is not known before that:
// TestApp_Run_GateHoldsUntilFenceStateKnown), a stage while the node is fenced
// and the volume still has journal entries, and always a stage that does not
// carry the epoch of this node's live grant on the datapath (a fresh grant
// after a fence).
//
// # Replay: a power cut of the datapath's machine loses no acknowledged write
//
// The datapath acknowledges a write once it is in its machine's page cache,
// and a flush makes the earlier ones durable. When that machine loses power,
// the acknowledged writes no flush covered are gone, and the restarted
// datapath answers the next flush "done": ext4 would take it as covering
// journal blocks that were lost, and the next mount's journal replay would
// stop at the hole, dropping every later transaction too. So each volume's
// backend keeps a copy of every acknowledged write until a flush covers it
// (unflushed.go: the latest content per byte range, a newer write trimming
// what it overlaps), with the boot id of the datapath's machine that
// acknowledged it, which the datapath reports with every answer (datapath
// package, "A power cut and the boot id"). A flush drops only the writes
// acknowledged before it was sent, by the boot that flushed. When an answer
// (to a read, a write or a flush) comes from another boot than kept writes,
// the backend sends those again before anything else (replay.go): it waits
// for the volume's requests in flight and holds new ones back, sends the kept
// writes oldest first (a second power cut meanwhile starts over for the
// newest boot), then reads again or flushes again; no pod sees an error and,
// since only the latest content of each range is kept, nothing newer is
// overwritten. A restart of the datapath's process keeps the boot id and costs
// nothing. Past --unflushed-write-budget (64 MiB per volume by default), or
// past --unflushed-write-node-budget for all the node's volumes together
// (512 MiB), a write flushes its volume first, so the engine's locked memory
// stays bounded (at most the node's budget, plus the writes in flight). A graceful stop
// (SIGTERM) flushes every volume after draining it, so nothing is left to
// keep; a crash of the engine loses what it kept, so an engine crash and a
// power cut of the datapath's machine before the next flush can still lose
// the writes of that window, as can a datapath that reports no boot id (an
// older release; the engine logs it once per volume). Proven on a real
// datapath over the power-loss layer, cut twice
// (TestVolumeBackend_DatapathPowerCut_FlushLosesNoAcknowledgedWrite: with the
// boot ids ignored it fails, "block 16 holds "aaaa"..., want "AAAA"..."), and
// on a model machine (TestVolumeBackend_Replay_*: reads never see a lost
// write, writes wait for the replay, a second cut during it, the budget);
// TestUnflushed_* specify the kept writes. The copy costs the backend's
// writes (BenchmarkVolumeBackend_Write, kept against not kept, on one real
// datapath; on a loaded 2-core machine 1 MiB writes went from about 2 GB/s
// to 0.5–1 GB/s, the copy plus the budget's flushes, 4 KiB writes from about
// 45 to 60 µs), while through ext4, the loop device and FUSE
// (BenchmarkSequentialWrite/filesystem) no difference showed above the noise.
//
// # Stopping: planned or not
//
// The engine heartbeats to the datapath every --heartbeat-interval; the
// manager takes a node whose engine stays silent past
// datapath-connectivity-loss-threshold as cut off from the storage and fails
// it over. A graceful stop (SIGTERM or SIGINT, as in a DaemonSet rolling
// update) announces itself: the engine stops heartbeating, then calls the
// datapath's Leave for --graceful-leave (default 1m, at most 2m), so its
// silence until the new engine's first heartbeat causes no failover; that
// heartbeat ends the announcement. A crashed engine (SIGKILL, OOM kill, a
// panic) announces nothing and, when no engine is back within the
// threshold, causes a failover, as it should. A panic in one CSI call is
// not recovered for that call alone: it may leave a lock held or a table
// half-changed, and an engine that still heartbeats but cannot serve would
// keep its node's pods stuck with no failover; ending the process is the
// side that the manager's checks cover. On SIGTERM the engine stops
// reading each disk's /dev/fuse once the requests it read are answered
// (NodeServer.StopServing) and exits; the fd keeper holds the connections and
// the next engine adopts them (see "The journal and restarts"); after a
// SIGKILL the same holds, the requests the dead engine read being sent again.
// Without a keeper the FUSE server of every staged volume dies with the
// engine, and the node's I/O is broken until a new engine serves the volumes
// again. Proven by TestApp_Run_SIGTERMAnnouncesLeaveSIGKILLDoesNot
// (real engine processes and a real datapath) and
// TestServeWithHeartbeats_LeavesOnlyWhenToldToStop.
//
// # Memory pressure: the engine never waits on its own writeback
//
// The engine serves the FUSE disks under the node's ext4 mounts, so when the
// kernel reclaims memory by writing dirty pages back, it may be writing to
// the engine. An engine that then needs reclaim itself (allocating, or
// faulting back a page that was dropped) would wait on its own I/O, and the
// node's writeback would deadlock. As block daemons in user space do (nbd,
// ublk, tcmu-runner), `run` first makes the process an I/O flusher
// (PR_SET_IO_FLUSHER: its allocations never recurse into I/O, and it is not
// throttled as a writer of dirty pages; needs CAP_SYS_RESOURCE) and locks
// its memory (mlockall MCL_CURRENT|MCL_FUTURE|MCL_ONFAULT; needs CAP_IPC_LOCK)
// (GuardWriteback, writeback.go). The I/O flusher state belongs to a thread
// and is inherited by threads created later and kept across execve, while a
// Go program has threads before main runs: the engine sets it on its own
// thread and executes itself again from there, same PID, so every thread of
// the engine that serves has it (TestEngineProcess_WritebackGuard_IOFlusher;
// TestGuardWriteback_ExecutesItselfOnce follows the execve without the
// capability).
// MCL_ONFAULT locks pages as they are touched instead of populating every
// mapping the Go runtime reserved: an idle engine's resident memory stays
// about 48 MB instead of 205 MB (TestEngineProcess_WritebackGuard_LocksMemory
// logs both); locked pages are never given back to the system, so the
// resident memory is the engine's peak. Without the privileges (an
// unprivileged container) the engine logs one Warning naming what is
// missing and serves anyway; --writeback-guard require refuses to start
// instead, off skips the guard
// (TestEngineProcess_WritebackGuard_WithoutCapabilities). The guard applies
// to the binary's own process only (ProcessApp): App, which runs the engine
// inside another program such as a test, leaves its process alone.
//
// # Registering with the kubelet
//
// With --kubelet-registration-dir (the kubelet's plugins_registry), the
// engine serves the kubelet's plugin registration API itself (registration.go),
// as node-driver-registrar would: GetInfo names driver.vigil.io, a CSI plugin
// of CSI 1.0.0, at the --csi-endpoint path; a registration the kubelet refuses
// is a Warning and vigil_engine_kubelet_registrations_total{outcome="failed"}
// (TestRegistration_*, TestServeRegistration_*,
// TestApp_Run_ServesKubeletRegistration; with a real kubelet,
// TestRealNodes_EngineRegistersWithKubelet in test/e2e). deploy/ runs no
// node-driver-registrar: the engine is alone in its pod.
//
// # Liveness
//
// The metrics listener (--metrics-address) also serves /healthz/csi
// (vigil.CSIProbePath): the CSI Probe of the engine's own socket, through the
// socket as the kubelet reaches it, 200 when it answers ready and 503 with the
// reason otherwise (datapath/csi.ProbeHandler; TestProbeHandler_*,
// TestApp_Run_ServesNodeHeartbeatsAndMetrics). deploy/'s liveness and
// readiness probes use it, in place of the upstream livenessprobe sidecar.
//
// The package owns the node service, the journal, heartbeats and metrics; it
// leaves the CSI socket and identity service to datapath/csi.Server, the
// controller service to the manager, and the datapath to its server.
package enginenode
