package settings

import (
	"fmt"
	"regexp"
	"time"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
)

// PodDeletionPolicy is the value of node-down-pod-deletion-policy: which pods on a
// down node the reaper force-deletes.
type PodDeletionPolicy string

// The pod deletion policies.
const (
	PolicyDoNothing            PodDeletionPolicy = "do-nothing"
	PolicyDeleteStatefulSetPod PodDeletionPolicy = "delete-statefulset-pod"
	PolicyDeleteDeploymentPod  PodDeletionPolicy = "delete-deployment-pod"
	PolicyDeleteBoth           PodDeletionPolicy = "delete-both-statefulset-and-deployment-pod"
)

func (p PodDeletionPolicy) String() string { return string(p) }

// CoversStatefulSets reports whether the policy reaps StatefulSet pods.
func (p PodDeletionPolicy) CoversStatefulSets() bool {
	return p == PolicyDeleteStatefulSetPod || p == PolicyDeleteBoth
}

// CoversDeployments reports whether the policy reaps pods of a ReplicaSet owned by
// a Deployment.
func (p PodDeletionPolicy) CoversDeployments() bool {
	return p == PolicyDeleteDeploymentPod || p == PolicyDeleteBoth
}

// AttachmentRecoveryPolicy is the value of volume-attachment-recovery-policy.
type AttachmentRecoveryPolicy string

// The attachment recovery policies.
const (
	RecoveryNever     AttachmentRecoveryPolicy = "never"
	RecoveryWait      AttachmentRecoveryPolicy = "wait"
	RecoveryImmediate AttachmentRecoveryPolicy = "immediate"
)

func (p AttachmentRecoveryPolicy) String() string { return string(p) }

// The names of the settings, for code that refers to one by name (the typed
// accessors are preferred).
const (
	NameNodeDownPodDeletionPolicy         = "node-down-pod-deletion-policy"
	NameVolumeAttachmentRecoveryPolicy    = "volume-attachment-recovery-policy"
	NameFastFencedTrigger                 = "fast-fenced-trigger"
	NameNodeDownGracePeriod               = "node-down-grace-period"
	NameNodeNotReadyDebounce              = "node-not-ready-debounce"
	NameExtraProtectedProvisioners        = "extra-protected-provisioners"
	NameCrashLoopPodDeletion              = "crash-loop-pod-deletion"
	NameCrashLoopRestartLimit             = "crash-loop-restart-limit"
	NameDatapathConnectivityLossThreshold = "datapath-connectivity-loss-threshold"
	NameDryRun                            = "dry-run"
	NameControlPlaneOutageThreshold       = "control-plane-outage-threshold"
	NameDefaultReplicaCount               = "default-replica-count"
)

// The categories, in the order the UI and README show them.
const (
	CategoryNodeFailure = "Node failure"
	CategoryCrashLoop   = "Crash loops"
	CategoryVolumes     = "Volumes"
	CategoryGeneral     = "General"
)

var definitions = []Definition{
	{
		Name: NameNodeDownPodDeletionPolicy, DisplayName: "Pod deletion policy when a node is down",
		Category: CategoryNodeFailure, Type: TypeEnum, Default: string(PolicyDoNothing),
		Description: "Which pods Vigil force-deletes from a node that is down, so their controller can start a replacement elsewhere. " +
			"Only pods that use a volume of a protected provisioner, and whose every other volume is node-local, are considered " +
			"(an inline nfs, iscsi or CSI volume, or a claim of another driver, is never proven fenced), never DaemonSet, Job or bare pods, " +
			"and never a pod annotated `" + vigil.ReapAnnotation + ": \"false\"`.",
		Choices: []Choice{
			{string(PolicyDoNothing), "Leave pods alone: Kubernetes' behaviour (StatefulSet pods stay stuck until a person intervenes)."},
			{string(PolicyDeleteStatefulSetPod), "Force-delete the StatefulSet pods on the down node."},
			{string(PolicyDeleteDeploymentPod), "Force-delete the pods of Deployments (ReplicaSets owned by a Deployment) on the down node."},
			{string(PolicyDeleteBoth), "Force-delete both StatefulSet and Deployment pods on the down node."},
		},
	},
	{
		Name: NameVolumeAttachmentRecoveryPolicy, DisplayName: "VolumeAttachment recovery policy",
		Category: CategoryNodeFailure, Type: TypeEnum, Default: string(RecoveryWait),
		Description: "What Vigil does with the VolumeAttachments a down node still holds, which otherwise block the replacement pod with a Multi-Attach error.",
		Choices: []Choice{
			{string(RecoveryNever), "Never delete VolumeAttachments; the attach/detach controller's 6-minute timeout applies."},
			{string(RecoveryWait), "Delete a down node's VolumeAttachments once a replacement pod is waiting for the volume and the node is fenced."},
			{string(RecoveryImmediate), "Delete a down node's VolumeAttachments as soon as its volumes are fenced, without waiting for a replacement pod."},
		},
	},
	{
		Name: NameFastFencedTrigger, DisplayName: "Fast fenced trigger",
		Category: CategoryNodeFailure, Type: TypeBool, Default: "false",
		Description: "Reap pods as soon as their node has been down for the grace period **and** every volume they use is proven fenced, instead of waiting for Kubernetes to mark them terminating (about 5 minutes). " +
			"Proven fenced means: the datapath revoked the node's grant of each volume (only `" + vigil.DriverName + "` volumes can be), " +
			"or Kubernetes says the machine is gone: the Node object was deleted, or it carries the out-of-service taint. " +
			"Deleting a Node or applying that taint tells Vigil the machine is off; do it only when it is.",
		Choices: []Choice{
			{"false", "Kubernetes-compatible trigger: force-delete a pod only once it is being deleted (Kubernetes' eviction, or anyone's delete) and its deletion time has passed. " +
				"That is more than Kubernetes does: it never force-deletes, it waits for the kubelet. " +
				"For `" + vigil.DriverName + "` volumes it is still safe, because a volume is granted to a new node only after the old node is fenced from it; " +
				"for volumes of `" + NameExtraProtectedProvisioners + "` it relies on nothing but that driver's own detach."},
			{"true", "Reap after `" + NameNodeDownGracePeriod + "` once every volume of the pod is proven fenced on the down node. " +
				"A node whose engine falls silent at the datapath is fenced at once, without waiting for the grace period."},
		},
	},
	{
		Name: NameNodeDownGracePeriod, DisplayName: "Node-down grace period",
		Category: CategoryNodeFailure, Type: TypeDuration, Default: "2s",
		MinDuration: 0, MaxDuration: 10 * time.Minute,
		Description: "With the fast fenced trigger, how long a node must have been down before its pods are reaped, and before a node that Kubernetes calls down is fenced. " +
			"A node whose engine falls silent at the datapath is fenced at once; only its reap waits for this.",
	},
	{
		Name: NameNodeNotReadyDebounce, DisplayName: "Ready=False debounce",
		Category: CategoryNodeFailure, Type: TypeDuration, Default: "15s",
		MinDuration: 0, MaxDuration: 10 * time.Minute,
		Description: "How long a node must stay Ready=False before Vigil treats it as down (Ready=Unknown and a deleted node count at once).",
	},
	{
		Name: NameDatapathConnectivityLossThreshold, DisplayName: "Datapath connectivity-loss threshold",
		Category: CategoryNodeFailure, Type: TypeDuration, Default: "3s",
		MinDuration: time.Second, MaxDuration: 5 * time.Minute,
		Description: "How long the datapath may go without a heartbeat from a node before that node counts as having lost connectivity to the storage.",
	},
	{
		Name: NameControlPlaneOutageThreshold, DisplayName: "Control-plane outage threshold",
		Category: CategoryNodeFailure, Type: TypeInt, Default: "55", MinInt: 1, MaxInt: 100,
		Description: "The percentage of a zone's nodes (label `topology.kubernetes.io/zone`; unlabelled nodes form one zone) or of the cluster's nodes " +
			"that, when Kubernetes calls them down or their Lease is stale while their engines still heartbeat to the datapath (and at least 3 of them), " +
			"means the control plane failed, not the nodes: nothing on them is fenced or reaped on Kubernetes' verdict while it lasts. " +
			"The same holds when no node of the cluster (or of a zone of at least 3 nodes) is Ready. Like the node lifecycle controller's `--unhealthy-zone-threshold`.",
	},
	{
		Name: NameExtraProtectedProvisioners, DisplayName: "Extra protected provisioners",
		Category: CategoryNodeFailure, Type: TypeStringList, Default: "",
		ItemDescription: "CSI driver names (at most 63 characters: letters, digits, '-', '_', '.'; beginning and ending with a letter or digit)",
		Description: "CSI provisioners whose volumes are protected in addition to `" + vigil.DriverName + "`: pods using them are reaped and their attachments recovered too. " +
			"Vigil cannot fence these volumes, so such a pod is never reaped on the fast trigger unless Kubernetes says its node is gone (deleted Node, out-of-service taint). " +
			"On the Kubernetes-compatible trigger it is force-deleted once its deletion time has passed, and then nothing but that driver's own detach keeps the old node from still writing: " +
			"list a driver here only if its detach fences the node (or you accept two writers).",
		Validate: validateDriverNames,
	},
	{
		Name: NameCrashLoopPodDeletion, DisplayName: "Delete crash-looping pods",
		Category: CategoryCrashLoop, Type: TypeBool, Default: "false",
		Description: "Delete a protected pod that is crash-looping (for example because its volume went read-only), so it is recreated with a fresh attachment.",
		Choices: []Choice{
			{"false", "Leave crash-looping pods alone."},
			{"true", "Delete a protected pod once a container has restarted `" + NameCrashLoopRestartLimit + "` times and is in CrashLoopBackOff."},
		},
	},
	{
		Name: NameCrashLoopRestartLimit, DisplayName: "Crash-loop restart limit",
		Category: CategoryCrashLoop, Type: TypeInt, Default: "5", MinInt: 1, MaxInt: 1000,
		Description: "With crash-loop pod deletion on, how many restarts of a container make its pod crash-looping.",
	},
	{
		Name: NameDefaultReplicaCount, DisplayName: "Default replica count",
		Category: CategoryVolumes, Type: TypeInt, Default: "3", MinInt: 1, MaxInt: datapath.MaxReplicas,
		Description: "How many copies of its data, each on a datapath server of its own, a new volume gets when its StorageClass does not say (parameter `replicas`). " +
			"A write is acknowledged once every in-sync copy and a majority of them took it, so a volume of 3 keeps serving when one server is lost; " +
			"each write travels that many times over the writer's network. " +
			"A count above the number of datapath servers is refused when a volume is provisioned (the claim stays Pending with an Event saying so). " +
			"A change applies to new volumes only: existing volumes keep the count they were created with.",
	},
	{
		Name: NameDryRun, DisplayName: "Dry run",
		Category: CategoryGeneral, Type: TypeBool, Default: "false",
		Description: "Decide but do not act: every action Vigil would take is logged and recorded as an Event, nothing is deleted or fenced.",
		Choices: []Choice{
			{"false", "Act on decisions."},
			{"true", "Only log and record what would be done."},
		},
	},
}

// byName indexes definitions; built once.
var byName = func() map[string]*Definition {
	m := make(map[string]*Definition, len(definitions))
	for i := range definitions {
		m[definitions[i].Name] = &definitions[i]
	}
	return m
}()

// Definitions returns every setting's definition, grouped by category in display
// order. The slice is a copy; the definitions must not be modified.
func Definitions() []Definition {
	out := make([]Definition, len(definitions))
	copy(out, definitions)
	return out
}

// Names returns every setting's name, in display order.
func Names() []string {
	out := make([]string, len(definitions))
	for i, d := range definitions {
		out[i] = d.Name
	}
	return out
}

// Lookup returns the definition of name, or an *UnknownSettingError suggesting
// the closest name.
func Lookup(name string) (*Definition, error) {
	if d, ok := byName[name]; ok {
		return d, nil
	}
	return nil, &UnknownSettingError{Name: name, Suggestion: closest(name, Names())}
}

// ParseValue parses and validates value for the setting name: the one entry point
// for "is this a valid value" (the CLI, the API and the fuzz target use it).
func ParseValue(name, value string) (any, error) {
	d, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	return d.Parse(value)
}

var csiDriverName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

func validateDriverNames(v any) error {
	for _, name := range v.([]string) {
		if !csiDriverName.MatchString(name) {
			return fmt.Errorf("%s is not a valid CSI driver name", Echo(name))
		}
	}
	return nil
}
