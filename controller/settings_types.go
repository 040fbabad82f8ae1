package controller

import "time"

// The settings package defines these types; until it is committed the controller
// declares the few it needs here. Replacing this file with type aliases to
// settings.PodDeletionPolicy and settings.Change is the whole switch.

// PodDeletionPolicy is the value of node-down-pod-deletion-policy.
type PodDeletionPolicy string

// The four values of node-down-pod-deletion-policy (DESIGN.md, contracts table).
const (
	PolicyDoNothing            PodDeletionPolicy = "do-nothing"
	PolicyDeleteStatefulSetPod PodDeletionPolicy = "delete-statefulset-pod"
	PolicyDeleteDeploymentPod  PodDeletionPolicy = "delete-deployment-pod"
	PolicyDeleteBoth           PodDeletionPolicy = "delete-both-statefulset-and-deployment-pod"
)

// SettingsChange is one change notification from the settings subscription.
type SettingsChange struct {
	Name, Value string
}

// SettingsReader is what the controllers read from settings: typed accessors for
// the settings they act on and a change subscription so a change acts at once.
type SettingsReader interface {
	NodeDownPodDeletionPolicy() PodDeletionPolicy
	FastFencedTrigger() bool
	NodeDownGracePeriod() time.Duration
	NotReadyDebounce() time.Duration
	ExtraProtectedProvisioners() []string
	DryRun() bool
	Subscribe() (changes <-chan SettingsChange, cancel func())
}
