package settings

import (
	"slices"
	"time"
)

// The typed accessors: one per setting, for code. Each is a lock-free load of a
// value parsed when it changed.

// NodeDownPodDeletionPolicy is node-down-pod-deletion-policy.
func (s *Settings) NodeDownPodDeletionPolicy() PodDeletionPolicy {
	return load[PodDeletionPolicy](s, NameNodeDownPodDeletionPolicy)
}

// VolumeAttachmentRecoveryPolicy is volume-attachment-recovery-policy.
func (s *Settings) VolumeAttachmentRecoveryPolicy() AttachmentRecoveryPolicy {
	return load[AttachmentRecoveryPolicy](s, NameVolumeAttachmentRecoveryPolicy)
}

// FastFencedTrigger is fast-fenced-trigger.
func (s *Settings) FastFencedTrigger() bool { return load[bool](s, NameFastFencedTrigger) }

// NodeDownGracePeriod is node-down-grace-period.
func (s *Settings) NodeDownGracePeriod() time.Duration {
	return load[time.Duration](s, NameNodeDownGracePeriod)
}

// NotReadyDebounce is node-not-ready-debounce.
func (s *Settings) NotReadyDebounce() time.Duration {
	return load[time.Duration](s, NameNodeNotReadyDebounce)
}

// ExtraProtectedProvisioners is extra-protected-provisioners; the caller may keep
// and modify the returned slice.
func (s *Settings) ExtraProtectedProvisioners() []string {
	return slices.Clone(load[[]string](s, NameExtraProtectedProvisioners))
}

// CrashLoopPodDeletion is crash-loop-pod-deletion.
func (s *Settings) CrashLoopPodDeletion() bool { return load[bool](s, NameCrashLoopPodDeletion) }

// CrashLoopRestartLimit is crash-loop-restart-limit.
func (s *Settings) CrashLoopRestartLimit() int { return load[int](s, NameCrashLoopRestartLimit) }

// DatapathConnectivityLossThreshold is datapath-connectivity-loss-threshold.
func (s *Settings) DatapathConnectivityLossThreshold() time.Duration {
	return load[time.Duration](s, NameDatapathConnectivityLossThreshold)
}

// ControlPlaneOutageThreshold is control-plane-outage-threshold, in percent.
func (s *Settings) ControlPlaneOutageThreshold() int {
	return load[int](s, NameControlPlaneOutageThreshold)
}

// DefaultReplicaCount is default-replica-count.
func (s *Settings) DefaultReplicaCount() int { return load[int](s, NameDefaultReplicaCount) }

// DryRun is dry-run.
func (s *Settings) DryRun() bool { return load[bool](s, NameDryRun) }
