package ui

import "github.com/vigil-storage/vigil/settings"

// Paths of the pages.
const (
	PathSettings   = "/"
	PathNodes      = "/nodes"
	PathRecoveries = "/recoveries"
	PathStatic     = "/static/"
	pathSave       = "/settings"
)

// dangerSettings are the node-failure policies the settings page puts in its
// Danger group, in this order.
var dangerSettings = []string{
	settings.NameNodeDownPodDeletionPolicy,
	settings.NameVolumeAttachmentRecoveryPolicy,
	settings.NameFastFencedTrigger,
}

// dangerGroup is the Danger group's title and its plain-words explanation.
const (
	dangerTitle = "Danger: what happens to pods when a node dies"
	dangerIntro = "Force deletion removes a pod from the API server without waiting for its node to confirm that the pod's " +
		"containers stopped. Its StatefulSet or Deployment then starts a replacement on another node at once. " +
		"That is safe only when the old node can no longer write to the pod's volumes. Vigil makes it safe by fencing " +
		"first: the storage refuses every write from the dead node before any pod is deleted. It is not safe for volumes " +
		"Vigil cannot fence, and it is never done to DaemonSet, Job or bare pods, or to pods annotated vigil.io/reap: \"false\"."
	blockedIntro = "A settings value it refused leaves a setting with a value in force that is not the one given, and no good " +
		"value stands in for it. Nodes are still judged and reported, but nothing is fenced, tainted or deleted until " +
		"this is fixed (the manager's /readyz fails meanwhile):"
	dryRunBanner = "Vigil decides but does not act: nothing is fenced or deleted, every decision is logged and recorded as an Event."
)

// Form field names of the settings form.
const (
	fieldToken = "token"
	fieldETag  = "etag"
	fieldReset = "reset"
	origPrefix = "orig."
)
