// Package controller holds Vigil's reconcilers: the closed loop from a node's
// failure to a replacement running elsewhere, with no chance of two writers.
// One workqueue (controller.go) carries three kinds of keys: nodes, pods and a
// down node's attachments; only the leader (leader.go) runs it.
//
// # The loop
//
//  1. Detect (node_health.go, node_sync.go, storage_watch.go). A node's verdict
//     comes from its Ready condition, judged on the manager's own clock (Unknown
//     at once, False after node-not-ready-debounce counted from the manager's
//     first observation, never from the kubelet's lastTransitionTime), from its
//     deletion (confirmed by a live GET before it counts as proof), from the
//     out-of-service taint, and from the fencing back end: a node whose engine
//     has sent no heartbeat for datapath-connectivity-loss-threshold, and has not
//     announced a graceful stop, is storage-isolated. When most nodes go silent
//     at once the problem is taken to be the storage's, and no node is judged
//     isolated. Conversely (control_plane_outage.go, control_plane_watch.go),
//     when enough of a zone's or the cluster's nodes are cut off from the API
//     server (not Ready, or their Lease stale) while their engines heartbeat,
//     the control plane is taken to have failed: those nodes are held, never
//     down on Kubernetes' verdict alone.
//  2. Fence (fence.go, fence_plan.go). With fast-fenced-trigger on, a
//     storage-isolated node is fenced at once and a node Kubernetes calls down is
//     fenced after node-down-grace-period: FenceVolumes revokes the node's live
//     grants (durable when it returns), then the Node gets
//     vigil.io/fenced:NoSchedule, then the node is marked fenced. Only then may
//     the fast trigger reap. A fence never strands a pod: decideFenceVolumes
//     leaves alone every volume a pod that will not be reaped uses (opted out,
//     not covered by the policy, a volume the back end cannot prove), closed over
//     shared volumes, and a pod the fence was for is reaped even when its node
//     comes back first (decideReturned), even by the next leader, which reads
//     the grants of each node it has not fenced once and takes the pods on
//     volumes still fenced there as the fence's (fence_resume.go,
//     decideResume). A back end that does not answer proves
//     nothing: a Warning Event, and a retry. While a fenced node stays
//     storage-isolated, a live grant given after the fence (a stage that raced
//     it) is fenced too on the next look at the node (fence_renew.go,
//     decideRefence), unless a report read just before shows its engine
//     heartbeating.
//  3. Reap (decide.go, pod_reaper.go): the decision table. A pod is reaped only
//     if every volume it mounts is node-local or a claim of a protected
//     provisioner; an inline nfs, iscsi, CSI, … volume is never proven, so the
//     slim pod cache keeps the first one of each pod, by name and kind
//     (volume_kind.go). The fast trigger needs every volume of the pod proven
//     fenced by the back end's attachment table (grant_proof.go); Kubernetes'
//     own proofs (deleted node, out-of-service taint) stand alone. Volumes of
//     drivers other than the back end's are never proven by Vigil.
//  4. Free attachments (attachments.go, attachment_recovery.go) by
//     volume-attachment-recovery-policy, once no pod on the down node uses the
//     volume: delete its VolumeAttachment (for Vigil's driver always safe, its
//     ControllerUnpublish fences first) and, once the node is proven fenced on
//     it, take it out of the node's status.volumesInUse, so the attach-detach
//     controller detaches it now instead of after its 6-minute wait.
//  5. Record (recovery.go): one NodeRecovery per failure, its status the
//     timeline, written in the background by the leader and continued by the
//     next one.
//  6. Return: the node's engine cleans up and removes the taint (package
//     enginenode); the record closes when the node is Ready and untainted.
//
// Crash-looping protected pods on live nodes are deleted, not forced, at most
// once per UID and with a backoff per owner (crash_loop.go).
//
// A fencing back end that also lists the volumes it refuses all I/O on because
// writing their data to disk failed (the datapath does) gets them polled with
// its connectivity: each newly failed volume gets a VigilVolumeFailed Warning
// Event on its PersistentVolume, and vigil_volumes_failed counts them
// (failed_volumes.go). Only an operator clears such a volume.
//
// Each reconciler reads a snapshot from shared informers (snapshot.go), calls a
// pure decide function with the settings and the clock passed in (decideFence,
// decideFenceVolumes, decideRefence, decideResume, decide, decideAttachment, decideCrashLoop — each tested
// as a table, decide as a full cross product against an independent oracle),
// and executes the resulting actions, each with a UID precondition or, for a
// Node, a patch under the resourceVersion read (node_patch.go), a Kubernetes
// Event and a Prometheus metric. A decision not carried out (dry run, or acting
// blocked by a bad managed setting) is an Event saying what would have been
// done. Informers keep only what the decisions read (transform.go,
// pod_cache.go), so tens of thousands of pods fit in a small manager.
//
// The package declares the small interfaces it needs and leaves their
// implementation to others: SettingsReader (*settings.Settings), FenceBackend
// (the datapath, datapath/fencebackend; its value types in package fenceapi)
// and RecoveryClient (*v1alpha1.Client). The end-to-end proof in a real cluster is
// test/e2e's TestLoop.
package controller
