package controller

import (
	"time"

	"github.com/vigil-storage/vigil/settings"
)

// PodDeletionPolicy is the value of node-down-pod-deletion-policy.
type PodDeletionPolicy = settings.PodDeletionPolicy

// The four values of node-down-pod-deletion-policy (docs/architecture.md, Contracts).
const (
	PolicyDoNothing            = settings.PolicyDoNothing
	PolicyDeleteStatefulSetPod = settings.PolicyDeleteStatefulSetPod
	PolicyDeleteDeploymentPod  = settings.PolicyDeleteDeploymentPod
	PolicyDeleteBoth           = settings.PolicyDeleteBoth
)

// SettingsReader is what the controllers read from settings: typed accessors for
// the settings they act on and a change subscription so a change acts at once.
// *settings.Settings implements it.
type SettingsReader interface {
	NodeDownPodDeletionPolicy() settings.PodDeletionPolicy
	VolumeAttachmentRecoveryPolicy() settings.AttachmentRecoveryPolicy
	FastFencedTrigger() bool
	NodeDownGracePeriod() time.Duration
	NotReadyDebounce() time.Duration
	ExtraProtectedProvisioners() []string
	CrashLoopPodDeletion() bool
	CrashLoopRestartLimit() int
	DatapathConnectivityLossThreshold() time.Duration
	ControlPlaneOutageThreshold() int
	DryRun() bool
	Subscribe() (changes <-chan settings.Change, cancel func())
}

var _ SettingsReader = (*settings.Settings)(nil)
