package controller

// Event reasons Vigil's controllers put on Pods, Nodes and PersistentVolumes. They are externally
// visible (kubectl get events, alerting rules), so they are defined here once.
const (
	// EventPodForceDeleted: a pod on a down node was force-deleted by policy.
	EventPodForceDeleted = "VigilForceDeletedPod"
	// EventVolumeAttachmentDeleted: a VolumeAttachment on a down node was deleted
	// (before its pod was force-deleted, or by attachment recovery).
	EventVolumeAttachmentDeleted = "VigilDeletedVolumeAttachment"
	// EventVolumeInUseCleared: a fenced volume was taken out of a down node's
	// status.volumesInUse, so the attach-detach controller detaches it at once.
	EventVolumeInUseCleared = "VigilClearedVolumeInUse"
	// EventAttachmentNotFreed: a deliberate non-action on a down node's attachment.
	EventAttachmentNotFreed = "VigilAttachmentNotFreed"
	// EventWouldForceDelete: dry run; the pod would have been force-deleted.
	EventWouldForceDelete = "VigilWouldForceDeletePod"
	// EventWouldDeleteVolumeAttachment: dry run; the attachment would have been deleted.
	EventWouldDeleteVolumeAttachment = "VigilWouldDeleteVolumeAttachment"
	// EventWouldClearVolumeInUse: dry run; the volume would have left volumesInUse.
	EventWouldClearVolumeInUse = "VigilWouldClearVolumeInUse"
	// EventPodNotReaped: a deliberate non-action on a pod of a down node.
	EventPodNotReaped = "VigilPodNotReaped"
	// EventReapFailed: an API call of the pod reaper or attachment recovery
	// failed; it is retried.
	EventReapFailed = "VigilReapFailed"
	// EventNodeDown: Vigil's node health verdict turned to down.
	EventNodeDown = "VigilNodeDown"
	// EventNodeRecovered: a node Vigil considered down is Ready again.
	EventNodeRecovered = "VigilNodeRecovered"
	// EventNodeStorageIsolated: the node's engine went silent at the datapath.
	EventNodeStorageIsolated = "VigilNodeStorageIsolated"
	// EventNodeFenced: the node was fenced out of the volumes of the pods to reap
	// (the others keep their grant) and tainted.
	EventNodeFenced = "VigilFencedNode"
	// EventNodeRefenced: a node still storage-isolated and fenced held live
	// grants given after its fence (a stage that raced it); they were fenced
	// too.
	EventNodeRefenced = "VigilRefencedNode"
	// EventFenceResumed: a node that is not down still had volumes fenced, by
	// a manager that led before this one, under pods still on it; those pods
	// are reaped as the fence promised, so they do not stay with failing I/O.
	EventFenceResumed = "VigilFenceResumed"
	// EventWouldFence: dry run; the node would have been fenced.
	EventWouldFence = "VigilWouldFenceNode"
	// EventFenceFailed: fencing or tainting failed (the back end unreachable…);
	// nothing is proven, it is retried.
	EventFenceFailed = "VigilFenceFailed"
	// EventControlPlaneOutage: Kubernetes calls the node down while its engine
	// still heartbeats to the datapath, as it does for enough of its zone's or
	// the cluster's nodes that the control plane is taken to have failed; the
	// node is held: nothing on it is fenced or reaped on Kubernetes' verdict.
	EventControlPlaneOutage = "VigilControlPlaneOutage"
	// EventCrashLoopDeleted: a crash-looping protected pod was deleted.
	EventCrashLoopDeleted = "VigilDeletedCrashLoopingPod"
	// EventCrashLoopNotDeleted: a crash-looping pod left alone (backoff, bound).
	EventCrashLoopNotDeleted = "VigilCrashLoopNotDeleted"
	// EventWouldDeleteCrashLoop: dry run; the crash-looping pod would have been deleted.
	EventWouldDeleteCrashLoop = "VigilWouldDeleteCrashLoopingPod"
	// EventVolumeFailed (on a PersistentVolume): writing the volume's data to
	// disk failed on the storage; its I/O is refused until an operator clears it.
	EventVolumeFailed = "VigilVolumeFailed"
	// EventVolumeServerDown (Warning, on a PersistentVolume): the storage
	// server holding the volume's data does not answer; the volume's I/O and
	// attach wait for it, other volumes are not affected.
	EventVolumeServerDown = "VigilVolumeServerDown"
	// EventVolumeServerBack (Normal, on a PersistentVolume): that server
	// answers again.
	EventVolumeServerBack = "VigilVolumeServerBack"
	// EventVolumeNoQuorum (Warning, on a PersistentVolume): fewer than a
	// majority of the volume's replicas are in sync on servers that answer;
	// its I/O is suspended until enough are back.
	EventVolumeNoQuorum = "VigilVolumeNoQuorum"
	// EventVolumeQuorumBack (Normal, on a PersistentVolume): a volume that
	// had no quorum has it again; its I/O goes on.
	EventVolumeQuorumBack = "VigilVolumeQuorumBack"
	// EventVolumeDegraded (Normal, on a PersistentVolume): a replica of the
	// volume is out of sync or its server does not answer; the volume keeps
	// its quorum and is served.
	EventVolumeDegraded = "VigilVolumeDegraded"
	// EventVolumeReplicasRestored (Normal, on a PersistentVolume): every
	// replica of a degraded volume is in sync on a server that answers again.
	EventVolumeReplicasRestored = "VigilVolumeReplicasRestored"
)

// RecoveryReasonControlPlaneOutage is the reason an open NodeRecovery gets
// while its node is held in a control-plane outage.
const RecoveryReasonControlPlaneOutage = "control-plane-outage"

// Metric names (the vigil_ prefix comes from vigil.MetricsNamespace).
const (
	metricSubsystemReaper    = "reaper"
	metricPodsDeleted        = "pods_deleted_total"
	metricAttachmentsDeleted = "volumeattachments_deleted_total"
	metricDecisions          = "decisions_total"
	metricNodesDown          = "nodes_down"
	metricNodesIsolated      = "nodes_storage_isolated"
	metricFenceDuration      = "fence_duration_seconds"
	metricFences             = "fences_total"
	metricRecoveryDuration   = "recovery_duration_seconds"
	metricAttachmentActions  = "attachment_recovery_actions_total"
	metricCrashLoopDeleted   = "crashloop_pods_deleted_total"
	metricDatapathReachable  = "datapath_reachable"
	metricEventsQueued       = "events_queued"
	metricEventsDropped      = "events_dropped_total"
	metricVolumesFailed      = "volumes_failed"
	metricVolumes            = "volumes"
	labelState               = "state"
	metricOutage             = "control_plane_outage"
	metricNodesHeldOutage    = "nodes_held_control_plane_outage"
	labelOwnerKind           = "owner_kind"
	labelPolicy              = "policy"
	labelDecision            = "decision"
	labelReason              = "reason"
	labelOutcome             = "outcome"
	labelAction              = "action"
	outcomeDone              = "done"
	outcomeFailed            = "failed"
	nodeIndex                = "spec.nodeName"
	claimIndex               = "spec.volumes.claim"
	ownerIndex               = "metadata.controller"
	attachmentByPVIndex      = "spec.source.persistentVolumeName"
	attachmentByNodeIndex    = "spec.nodeName"
	pvByHandleIndex          = "spec.csi.driver^volumeHandle"
)
