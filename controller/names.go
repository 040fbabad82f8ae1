package controller

// Event reasons Vigil's controllers put on Pods and Nodes. They are externally
// visible (kubectl get events, alerting rules), so they are defined here once.
const (
	// EventPodForceDeleted: a pod on a down node was force-deleted by policy.
	EventPodForceDeleted = "VigilForceDeletedPod"
	// EventVolumeAttachmentDeleted: a VolumeAttachment on a down node was deleted
	// before its pod was force-deleted.
	EventVolumeAttachmentDeleted = "VigilDeletedVolumeAttachment"
	// EventWouldForceDelete: dry run; the pod would have been force-deleted.
	EventWouldForceDelete = "VigilWouldForceDeletePod"
	// EventWouldDeleteVolumeAttachment: dry run; the attachment would have been deleted.
	EventWouldDeleteVolumeAttachment = "VigilWouldDeleteVolumeAttachment"
	// EventPodNotReaped: a deliberate non-action on a pod of a down node.
	EventPodNotReaped = "VigilPodNotReaped"
	// EventReapFailed: an API call of the reaper failed; it is retried.
	EventReapFailed = "VigilReapFailed"
	// EventNodeDown: Vigil's node health verdict turned to down.
	EventNodeDown = "VigilNodeDown"
	// EventNodeRecovered: a node Vigil considered down is Ready again.
	EventNodeRecovered = "VigilNodeRecovered"
)

// Metric names (the vigil_ prefix comes from vigil.MetricsNamespace).
const (
	metricSubsystemReaper    = "reaper"
	metricPodsDeleted        = "pods_deleted_total"
	metricAttachmentsDeleted = "volumeattachments_deleted_total"
	metricDecisions          = "decisions_total"
	metricNodesDown          = "nodes_down"
	labelOwnerKind           = "owner_kind"
	labelPolicy              = "policy"
	labelDecision            = "decision"
	labelReason              = "reason"
	nodeIndex                = "spec.nodeName"
	attachmentByPVIndex      = "spec.source.persistentVolumeName"
)
