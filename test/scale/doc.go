// Package scale is Vigil's scale benchmark (`make bench-scale`): a rack failure
// in a cluster of hundreds of nodes.
//
// TestScale_RackFailure brings up a scale sandbox (package sandbox, Racks: one
// kwok and one heartbeat process per rack of SCALE_RACK_SIZE nodes, each node
// heartbeating with its own datapath token over TLS) with Vigil's stack, creates SCALE_PODS pods of which SCALE_PROTECTED are protected
// (StatefulSets of up to 50 pods with Parallel pod management, each pod on a static ReadWriteOnce volume that
// exists in the datapath, attached by the real csi-attacher so that the node
// holds a grant) and the rest unprotected (Deployments of up to 100 pods without
// volumes), and runs one `vigil-manager run` with the datapath (delete-both,
// fast trigger, attachment recovery immediate). Then it cuts the power of rack-1 and watches,
// with informers, for:
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
// SCALE_REPORT (default $TMPDIR/vigil-scale-report). Without SCALE_* it runs a
// smoke size: 2 racks of 10 nodes, 200 pods, 50 protected.
package scale
