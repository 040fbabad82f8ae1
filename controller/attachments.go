package controller

import (
	"strings"
	"time"

	"github.com/vigil-storage/vigil/settings"
)

// AttachmentPolicy is the value of volume-attachment-recovery-policy.
type AttachmentPolicy = settings.AttachmentRecoveryPolicy

// The three values of volume-attachment-recovery-policy.
const (
	AttachmentNever     = settings.RecoveryNever
	AttachmentWait      = settings.RecoveryWait
	AttachmentImmediate = settings.RecoveryImmediate
)

// Attachment recovery's actions (after ActionForceDeletePod, so a reap's
// VolumeAttachment deletes still sort first).
const (
	// ActionClearVolumeInUse takes a fenced volume out of the down node's
	// status.volumesInUse: the node cannot do it itself, and while the volume is
	// listed the attach-detach controller waits 6 minutes before detaching it.
	ActionClearVolumeInUse ActionKind = iota + ActionForceDeletePod + 1
)

// Reasons of attachment recovery's decisions.
const (
	ReasonAttachNodeNotDown     Reason = "node-not-down"
	ReasonAttachNotProtected    Reason = "volume-not-protected"
	ReasonAttachPodsOnNode      Reason = "pods-on-node-use-it"
	ReasonAttachPolicyNever     Reason = "attachment-policy-never"
	ReasonAttachNoReplacement   Reason = "no-replacement-waiting"
	ReasonAttachNotProvenFenced Reason = "not-proven-fenced"
	ReasonAttachAwaitingFence   Reason = "awaiting-fence-proof"
	ReasonAttachFreed           Reason = "freed"
	ReasonAttachNothingToDo     Reason = "nothing-left"
	ReasonAttachAttaching       Reason = "attach-in-progress"
	attachmentProofRecheck             = 500 * time.Millisecond
	volumeInUsePrefix                  = "kubernetes.io/csi/"
	actionLabelDeleteAttachment        = "delete-volumeattachment"
	actionLabelClearVolumeInUse        = "clear-volume-in-use"
)

// volumeOnNode is one protected volume a down node still holds: its
// VolumeAttachment, its entry in the node's status.volumesInUse, or both.
type volumeOnNode struct {
	PVName, Driver, Handle string
	// ClaimNamespace/Claim is the PV's claim ("" when unbound).
	ClaimNamespace, Claim string
	// Attachment is the VolumeAttachment on the node; nil if there is none.
	Attachment *Attachment
	// InUse: the node's status.volumesInUse lists UniqueName.
	InUse      bool
	UniqueName string
	// PodsOnNode are the pods bound to the node that still use the claim.
	PodsOnNode []string
	// Replacement is a pod elsewhere (or unscheduled) using the claim and not
	// terminating: the pod waiting for the volume ("" when none).
	Replacement string
	// Proven: the fencing back end says the node holds no live grant on Handle
	// (only ever set for the back end's own driver).
	Proven bool
}

// attachmentDecision is decideAttachment's answer.
type attachmentDecision struct {
	Reason       Reason
	Actions      []Action
	RecheckAfter time.Duration
}

// decideAttachment applies volume-attachment-recovery-policy to one volume a
// down node holds. It is pure. Acting means: delete the VolumeAttachment (for
// Vigil's own driver that is always safe, because its ControllerUnpublish fences
// the node before releasing it, and the object goes only after that), and, once
// the back end proves the node fenced on the volume, take it out of the node's
// volumesInUse so the attach-detach controller detaches it now instead of after
// its 6-minute wait. A volume of another driver is never proven fenced by Vigil:
// unless Kubernetes itself proves the node gone (deleted, out-of-service), its
// own timeout stands.
func decideAttachment(v *volumeOnNode, node NodeVerdict, set *Settings) attachmentDecision {
	switch {
	case !node.State.Down():
		return attachmentDecision{Reason: ReasonAttachNodeNotDown}
	case !isProtectedDriver(v.Driver, set.ExtraProtectedProvisioners):
		return attachmentDecision{Reason: ReasonAttachNotProtected}
	case len(v.PodsOnNode) > 0:
		return attachmentDecision{Reason: ReasonAttachPodsOnNode}
	case set.AttachmentPolicy == AttachmentNever:
		return attachmentDecision{Reason: ReasonAttachPolicyNever}
	case set.AttachmentPolicy == AttachmentWait && v.Replacement == "":
		return attachmentDecision{Reason: ReasonAttachNoReplacement}
	}
	ours := v.Driver != "" && v.Driver == set.BackendDriver
	if !ours && !node.State.Fenced() {
		return attachmentDecision{Reason: ReasonAttachNotProvenFenced}
	}
	d := attachmentDecision{Reason: ReasonAttachFreed}
	if a := v.Attachment; attachmentGoes(a) {
		d.Actions = append(d.Actions, Action{Kind: ActionDeleteVolumeAttachment, Name: a.Name, UID: a.UID, PVName: v.PVName})
	}
	if v.InUse && node.State != NodeDownDeleted {
		switch {
		case ours && v.Proven:
			d.Actions = append(d.Actions, Action{Kind: ActionClearVolumeInUse, Name: v.UniqueName, PVName: v.PVName})
		case ours:
			// The VolumeAttachment's deletion fences through ControllerUnpublish;
			// the proof follows.
			d.RecheckAfter = attachmentProofRecheck
			if len(d.Actions) == 0 {
				d.Reason = ReasonAttachAwaitingFence
			}
		}
	}
	if len(d.Actions) == 0 && d.Reason == ReasonAttachFreed {
		d.Reason = ReasonAttachNothingToDo
		if a := v.Attachment; a != nil && !a.Deleting && !a.Attached {
			d.Reason = ReasonAttachAttaching
		}
	}
	return d
}

// reapAttachmentActions are the VolumeAttachment deletes a reap does first
// (decision table row 5) under volume-attachment-recovery-policy: only with
// immediate (wait acts once the replacement exists, never not at all), only on
// the pod's node, and only where attachment recovery could act too (Vigil's own
// driver, or a node Kubernetes proves gone).
func reapAttachmentActions(s *Snapshot, node NodeVerdict, set *Settings) []Action {
	if set.AttachmentPolicy != AttachmentImmediate {
		return nil
	}
	drivers := make(map[string]string, len(s.Volumes))
	for _, v := range s.Volumes {
		if v.PVName != "" {
			drivers[v.PVName] = v.Driver
		}
	}
	var out []Action
	for _, a := range s.Attachments {
		d := drivers[a.PVName]
		if a.NodeName != s.Pod.Spec.NodeName || !attachmentGoes(&a) || !isProtectedDriver(d, set.ExtraProtectedProvisioners) {
			continue
		}
		if (d == "" || d != set.BackendDriver) && !node.State.Fenced() {
			continue
		}
		out = append(out, Action{Kind: ActionDeleteVolumeAttachment, Name: a.Name, UID: a.UID, PVName: a.PVName})
	}
	return out
}

// uniqueVolumeName is a CSI volume's name in node.status.volumesInUse.
func uniqueVolumeName(driver, handle string) string {
	return volumeInUsePrefix + driver + "^" + handle
}

// parseUniqueVolumeName splits a volumesInUse entry of a CSI volume.
func parseUniqueVolumeName(name string) (driver, handle string, ok bool) {
	rest, ok := strings.CutPrefix(name, volumeInUsePrefix)
	if !ok {
		return "", "", false
	}
	driver, handle, ok = strings.Cut(rest, "^")
	return driver, handle, ok && driver != "" && handle != ""
}
