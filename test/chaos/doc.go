// Package chaos is Vigil's chaos suite: long randomized runs of faults against
// the sandbox with Vigil's whole stack, checked by the data itself.
//
// # The world
//
// Setup brings up a sandbox of 5 nodes with the volume stack (datapath, CSI
// controller and sidecars, an engine and a kubelet stand-in per node), two
// `vigil-manager run` processes as deploy/'s vigil-manager ServiceAccount, on
// its Lease, reaching the datapath over TLS with the manager's token, under
// leader election (short Lease timings,
// settings delete-both…, fast trigger on, attachment recovery immediate), and a
// workload of a StatefulSet of 3 (one pod per node) and a Deployment of 1, every
// pod on a ReadWriteOnce volume of Vigil's StorageClass. For each running pod
// whose volume the kubelet stand-in has published, a writer (package
// sandbox/ledger, `vigil-sandbox writer`) runs on the pod's node, inside its
// network namespace, on the pod's target path, and in a mount namespace of its
// own with that path bound privately when it starts, as a container sees its
// volume (writer --own-mount-namespace): a mount the engine replaces after a
// restart is not seen, so an engine restart passes only when the mount the
// writer started with keeps working. It appends fsync'd records and
// acknowledges each in a ledger on the host. The harness plays the kubelet's
// part for the writers: it starts one when a pod's volume is published and kills
// it once the pod is gone and its node can see that, so a zombie's writer goes on
// writing until its node is healed.
//
// # A cycle
//
// Each cycle draws one fault from its own seed (CycleSeed of the run's seed,
// both printed, so CHAOS_REPLAY=SEED runs that cycle again): a power cut; a
// partition shorter than the detection threshold of its target (no failover
// allowed); a long partition from the API server only (a zombie), the datapath
// only, or both; flapping; SIGKILL of the leading manager at the node's first
// fence or first reap; SIGKILL of a node's engine; SIGKILL and restart of the
// datapath (its host's page cache survives: this proves nothing about fsync);
// a power cut of the datapath's machine (datapath-power-cut: the datapath and
// the power-loss layer under its data directory, internal/powerfs, SIGKILLed
// at once, so what it had not fsynced is lost; Setup puts the layer there
// only when CHAOS_FAULTS can draw this kind); a restart of the API server; every node cut off from the API
// server only, past Kubernetes' Unknown and the grace (a control-plane outage:
// no failover, nothing fenced); a node cut off from everything and healed as
// soon as the datapath shows its fence, before the reap
// (partition-heals-after-fence; for the cycle the managers'
// node-down-grace-period is 10 s,
// set and reset through their REST API: with the default 2 s, counted from
// the silence, the reap follows the isolation fence within milliseconds; its
// fenced pods must not stay stranded; the manager reaps them on its return,
// decideReturned, and each cycle's reap triggers are in the JSON report); a
// pod opted out of reaping (vigil.io/reap: "false", on a claim of its own,
// for one cycle) on a node that is powered off or cut off from the datapath
// or everything (fence-uncovered-pod: the covered pods fail over, the
// opted-out one stays, and writes again once its node is back; the engine
// keeps the fenced taint while its volume is published, so the node must be
// clean only after it is gone) (Fault, Draw). It injects the fault,
// waits for what the fault expects (Expect), and checks after every cycle:
//
//   - 0 lost acknowledged writes: every ledger entry of every writer a volume
//     has had is in the volume, read with O_DIRECT through the mount of the
//     claim's current pod, so from the datapath and not a node's page cache;
//   - 0 writes from a fenced node: no record whose time falls in a span during
//     which the datapath had the record's node fenced on that volume (the
//     spans are built from the datapath's attachment rows, polled every 500 ms;
//     the datapath keeps only each row's latest state);
//   - every covered pod runs again within its bound: writers write again within
//     30 s of a transient fault's end, replacements within 90 s of a node's
//     failure (sandbox timings);
//   - no pod is left with failing I/O once its node is back: every claim's
//     pod acknowledges a new record within 30 s at the end of every cycle,
//     and for the two kinds above the pods of the fault's node do, once it
//     is back, within their bounds; a violation names the pod, its node, its
//     last acknowledged record and its writer's last error (failingIO);
//   - a node that came back is Ready, without vigil.io/fenced and clean within 30 s;
//   - no mount, FUSE disk or loop device under a node's directory that no pod of
//     the node explains;
//   - epochs never decrease (per attachment row and per volume);
//   - no failover where none is expected (same pod, same node, nobody fenced).
//
// The managers', the engines' and the datapath's RSS is sampled after every
// cycle; a series of at least 12 samples must stay flat (last quarter's median
// at most 1.3 × the first quarter's + 16 MiB). The run fails at the first cycle
// with a violation, naming its seed.
//
// # The datapath as a group of servers
//
// With CHAOS_DATAPATH_SERVERS=3 (implied when CHAOS_FAULTS lists only these
// kinds) the datapath is three servers in one Raft group, a process each of
// node-1 to node-3 (sandbox's --datapath-servers 3), and a cycle draws from
// three kinds of its own, never from the others: a volume's data has one
// copy, on the server chosen at its creation, so a host kind that cuts a node
// would take that server's volumes with it, which the host kinds'
// expectations do not allow for (ServerKinds). The kinds:
// datapath-leader-power-cut (the leader's node powered off, on again at the
// cycle's end), datapath-server-partition (the leader's or a follower's
// server cut off from the other two only, sandbox's datapath-group target,
// then healed) and datapath-rolling-restart (each server in turn stopped
// with SIGTERM, handing its leadership over, and started again, the next
// only once it is back in the group: it answers as leader or follower and
// has applied the log as it was when it left). A leader's power cut expects
// per claim (claimExpect, Expect server-loss): a pod of the node whose
// volume lives on another server fails over within its bound; a pod of the
// node whose volume lives on the node's own server may or may not, and
// writes again once the server is back; every other pod stays, stalling
// only if its volume lives on the lost server; no other node is fenced. The
// other two kinds expect no failover. Each cycle also checks:
//
//   - epochs never go back: every 500 ms the harness asks each server for
//     its role and the one that leads for the group's volumes (what
//     `vigil-datapath status -o json` shows), and an epoch lower than the
//     highest seen of that volume before, in this cycle or an earlier one,
//     is a violation naming the volume, both epochs and the leader that
//     answered each (epochWatch);
//   - a cut-off server answers no change from stale state: before the cut
//     a probe volume of no pod is granted to a node that does not exist;
//     during it, the cut-off server alone is asked to fence it, then the
//     rest of the group fences it and the cut-off server alone is asked to
//     grant it again. Each must be refused, or else be in the group's record
//     after the heal at the epoch it was answered with, above the majority's
//     fence (probeStale).
//
// `make chaos` runs CHAOS_CYCLES cycles with the host server, then
// CHAOS_SERVER_CYCLES (default 15) in a second sandbox with the servers;
// the second report goes to CHAOS_REPORT's servers/.
//
// # The closed loop
//
// Faults whose covered pods only come back if the manager fences, reaps and
// frees attachments by itself (power cut, long partitions, manager kills, a
// heal after the fence, an uncovered pod's node fenced) are drawn only when `vigil-manager run` has the datapath flags (managerHasLoop);
// until then a run draws from the other kinds and the report lists the rest as
// not run. CHAOS_FAULTS=all forces every kind, CHAOS_FAULTS=a,b a list.
//
// # The report
//
// Report writes chaos-report.md (a table per fault kind: cycles, failovers,
// recovery median and max, node return, violations; the memory series; every
// violation with its cycle's seed) and chaos-report.json (every cycle, its
// fault, times and data check) into CHAOS_REPORT (default
// $TMPDIR/vigil-chaos-report). `make chaos` runs CHAOS_CYCLES cycles (default
// 100); `make test` runs 5.
package chaos
