// Package kubelet is the volume half of a kubelet for one simulated node of the
// sandbox. kwok, the sandbox's kubelet, marks pods Running whatever their volumes
// and never reports node.status.volumesInUse; Run fills that gap: it calls the
// node's CSI node service (vigil-engine-node) for the pods kwok runs there and
// reports what is mounted, so that a pod Running in the sandbox has its volumes
// really staged and published, and the attach-detach controller's detach safety
// (no detach of a volume in use) is exercised as on a real node.
//
// # What it mimics from the kubelet's volume manager
//
//   - The desired state: pods bound to the node (a field-selected informer on
//     spec.nodeName) that are not terminal; their PVC volumes and generic
//     ephemeral volumes (the claim <pod>-<volume>, which must be controlled by
//     the pod); bound claims only; PVs with a CSI source of the driver. A pod
//     being deleted keeps what it has mounted but gets nothing new.
//   - Attachment: a volume is staged only once the VolumeAttachment the
//     attach-detach controller names csi-sha256(handle+driver+node) says
//     attached: true; its status.attachmentMetadata is the publish context
//     (for Vigil, the epoch of the grant). A CSIDriver with attachRequired:
//     false needs none; a missing CSIDriver means attach required.
//   - The calls: NodeGetCapabilities decides whether to stage;
//     NodeStageVolume once per volume at
//     ROOT/plugins/kubernetes.io/csi/DRIVER/sha256(handle)/globalmount;
//     NodePublishVolume per pod at
//     ROOT/pods/UID/volumes/kubernetes.io~csi/PV/mount (Block volumes:
//     ROOT/plugins/kubernetes.io/csi/volumeDevices/{staging/PV,publish/PV/UID});
//     the capability from the PV's volumeMode, accessModes, csi.fsType and
//     mountOptions; the volume context from csi.volumeAttributes plus, when the
//     CSIDriver has podInfoOnMount, the pod's name, namespace, UID and service
//     account; readonly from the pod's claim or the PV. NodeUnpublishVolume when
//     the pod is gone or terminal, NodeUnstageVolume when no pod uses the
//     volume any more.
//   - node.status.volumesInUse lists kubernetes.io/csi/DRIVER^HANDLE for every
//     volume a pod here wants or that is not yet unstaged; an entry goes only
//     after its unstage succeeded. Nothing is staged before the volume is
//     reported in use (the kubelet's ReportedInUse gate), so the attach-detach
//     controller never detaches a volume being mounted. The status is written
//     with a JSON merge patch of the status subresource naming volumesInUse
//     only: volumesAttached (the attach-detach controller's) and what kwok
//     writes stay untouched; a node update that loses the list is repaired.
//   - Failed operations stay "uncertain" (they may have half-happened, so they
//     are undone when the pod goes) and are retried with exponential backoff
//     per operation (500 ms doubling up to 2 min); each failure is a Warning
//     event on the pods waiting for it (FailedMount, FailedMapVolume for
//     Block) or on the node for a teardown (FailedUnmount). A volume that can
//     never be mounted (empty handle, a PV provisioned by the driver without a
//     CSI source, unusable access modes, an ephemeral claim of another pod) is
//     one Warning event per problem, and no call.
//   - Restarts: the actual state is kept in ROOT/vigil-kubelet-state.json,
//     written before each call and after it. A new run (after a power cut or a
//     reboot of the node) reads it back with every stage and publish marked
//     uncertain: volumes of pods that are gone are unpublished and unstaged,
//     and those of pods still here are staged and published again (the node
//     service's calls are idempotent, and after a reboot it has taken
//     everything down). The kubelet does the same with the volumes it
//     reconstructs from its pod directories; until they are taken down, they
//     are reported in use, even while the node service is not up yet.
//
// # What it does not do
//
// It runs no containers, checks no volumeMounts against volumeDevices, mounts
// only CSI volumes of one driver (no in-tree, inline CSI, secret, configMap or
// projected volumes), passes no node-stage/publish secrets, does not resize,
// report volume stats or set up the block device symlinks inside pod
// directories, and does not wait for containers to stop before unmounting (kwok
// has none). Operations on different volumes run concurrently but, unlike the
// kubelet, a volume's operations are one plan at a time. One deliberate
// difference: when the VolumeAttachment's publish context changes while the
// volume is staged (Vigil's new epoch after a fence), it stages again so the
// node service learns the new epoch; the kubelet would only do so after a
// detach and re-attach.
//
// # Running it
//
// Run is the entry point; Command wraps it as the `kubelet` subcommand of
// bin/vigil-sandbox, whose flags default to the environment the sandbox gives a
// node's processes (VIGIL_NODE, VIGIL_KUBECONFIG, VIGIL_NODE_DIR), so that it
// runs inside the node's network namespace and dies with the node. Its client
// needs to read pods, PVCs, PVs, VolumeAttachments and CSIDrivers, patch
// nodes/status and create events; the sandbox's stack runs it as its node, as
// a kubelet runs (sandbox.NodeKubeconfig: system:node:NAME, held to its own
// Node by the API server's Node authorizer and NodeRestriction).
//
// The package owns only this stand-in; the node service is engine-node's, the
// node's lifecycle (kwok, network namespace, start and stop) is sandbox's.
package kubelet
