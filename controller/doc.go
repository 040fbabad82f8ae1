// Package controller is Vigil's closed loop: from a node's failure to its
// pods running elsewhere, never with two writers on a volume.
//
// # What it owns
//
// A Controller (controller.go) runs one rate-limited queue fed by shared
// informers, on the leader only (leader.go), and hands each key to one of
// five reconcilers behind one interface (reconciler.go), each in its own
// file:
//
//   - node health (reconcile_node_health.go) judges each node from its Ready
//     condition on the manager's own clock, its deletion confirmed by a live
//     GET, the out-of-service taint, the storage watch's isolation marks
//     (storage_watch.go) and the control-plane outage rule
//     (control_plane_outage.go, control_plane_watch.go);
//   - the node fence (reconcile_node_fence.go, node_fence_*.go) fences a down
//     node out of the volumes of the pods that will be reaped, taints it
//     vigil.io/fenced:NoSchedule, and keeps that fence's promise;
//   - the pod reaper (reconcile_pod_reaper.go) applies the decision table
//     (decide.go) and force-deletes;
//   - attachment recovery (reconcile_attachment_recovery.go, attachments.go)
//     frees what a down node still holds: its VolumeAttachments and its
//     status.volumesInUse entries;
//   - crash-loop deletion (reconcile_crash_loop.go, crash_loop.go) deletes
//     crash-looping protected pods on live nodes.
//
// Every concern records its steps in one NodeRecovery per failure
// (recovery.go), written in the background by the leader and continued by
// the next one. The storage watch also reports the volumes the fence back end
// refuses all I/O on (failed_volumes.go), the volumes whose one server does
// not answer (server_outage.go), and the volumes of several replicas that
// are degraded or lost their quorum (volume_quorum.go).
//
// # What it guarantees
//
//   - A pod is force-deleted only as the decision table says (decide), and on
//     the fast trigger only once every one of its volumes is proven fenced on
//     its node: the fence back end shows the node's grant revoked
//     (grant_proof.go), or Kubernetes proves the machine gone (Node deleted,
//     out-of-service taint). An inline network or CSI volume, or a claim of an
//     unprotected driver, is never proven. A back end that does not answer
//     proves nothing.
//   - A fence never strands a pod: it covers only the volumes of pods that
//     will be reaped (decideFenceVolumes), and each of those is reaped even if
//     its node comes back first, by this leader or the next (decideReturned,
//     decideResume).
//   - Nothing is fenced or reaped on Kubernetes' verdict while the control
//     plane, not the nodes, has failed (decideOutage), and no node is judged
//     storage-isolated while most are silent at once (isolation).
//   - In a dry run, or while a refused setting blocks acting, nothing is
//     fenced, tainted, deleted or taken out of volumesInUse: an Event says
//     what would have been done.
//   - Every delete carries a UID precondition and every Node change is a patch
//     under the resourceVersion read (node_patch.go); every action and every
//     deliberate non-action is an Event and a metric.
//   - Only the leader acts, and Run returns only once nothing acts any more.
//
// Each decision is a pure function with the settings and the clock passed in
// (decide, decideFence, decideFenceVolumes, decideRefence, decideResume,
// decideAttachment, decideCrashLoop, decideOutage), and its table test is its
// specification; decide's is also checked, as a full cross product, against
// an independent oracle.
//
// # What it leaves to others
//
// It declares the small interfaces it needs and leaves their implementation
// to others: SettingsReader (*settings.Settings), FenceBackend (the datapath,
// datapath/fencebackend; its value types in package fenceapi) and
// RecoveryClient (*v1alpha1.Client). A returning node's cleanup and the
// removal of its fenced taint belong to its engine (package enginenode);
// granting a volume to a new node only once the old one is fenced belongs to
// the datapath's CSI controller (datapath/csi). The end-to-end proof in a real
// cluster is test/e2e's TestLoop.
package controller
