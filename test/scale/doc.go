// Package scale is Vigil's scale benchmark (`make bench-scale`): a rack failure
// in a cluster of hundreds of nodes.
//
// TestScale_RackFailure brings up a scale sandbox (package sandbox, Racks: one
// kwok and one heartbeat process per rack of SCALE_RACK_SIZE nodes, each node
// heartbeating with its own datapath token over TLS) with Vigil's stack, creates SCALE_PODS pods of which SCALE_PROTECTED are protected
// (StatefulSets of up to 50 pods with Parallel pod management, each pod on a static ReadWriteOnce volume that
// exists in the datapath, attached by the real csi-attacher so that the node
// holds a grant) and the rest unprotected (Deployments of up to 100 pods without
// volumes). It creates them in waves of at most 2,000 pods, each once the ones
// before run: every rack's kwok watches every pod of the cluster, and a kwok
// that falls behind has its watch closed by the API server and replays what it
// missed, which at 500 nodes turned a burst of 20,000 pods into an hour of
// replays. The sandbox runs Kubernetes' default node timings (Lease 40 s,
// node-monitor grace 50 s, tolerations 300 s), and a rack's nodes report their
// status every 5 minutes as kubelets with Leases do. Then it runs one
// `vigil-manager run` with the datapath (delete-both, fast trigger, attachment
// recovery immediate), waits for its /readyz (its informers have listed
// everything), cuts the power of rack-1 and watches, with informers, for:
//
//   - detection: the manager's, the last detectedAt of the rack's NodeRecovery
//     records (and fencedAt), and Kubernetes', every node of the rack
//     Ready=Unknown;
//   - reaped: every protected pod that was on the rack gone from the API;
//   - scheduled: every replacement of those pods (same StatefulSet pod name,
//     new UID) bound to a node.
//
// It reports those times, the setup's duration, the manager's RSS (now and
// peak) and CPU over the measurement, the API requests the manager made during
// it by verb and resource (it runs as deploy/'s vigil-manager ServiceAccount,
// with deploy/'s roles, and the sandbox's audit log records that
// ServiceAccount's requests) and the RSS of every
// control-plane process, as tables in the test log and as scale-report.json in
// SCALE_REPORT (default $TMPDIR/vigil-scale-report), with the manager's log
// (manager.log). SCALE_KEEP=1 leaves the sandbox up afterwards. Without
// SCALE_* it runs a smoke size: 2 racks of 10 nodes, 200 pods, 50 protected.
package scale
