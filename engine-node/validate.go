package enginenode

import (
	"path/filepath"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	vcsi "github.com/vigil-storage/vigil/datapath/csi"
)

// Pod identity keys the kubelet puts in the volume context when the CSIDriver
// has podInfoOnMount: the journal records which pod a publish is for.
const (
	podUIDKey       = "csi.storage.k8s.io/pod.uid"
	podNameKey      = "csi.storage.k8s.io/pod.name"
	podNamespaceKey = "csi.storage.k8s.io/pod.namespace"
)

// supportedFsTypes are the filesystems a Filesystem-mode volume may ask for.
var supportedFsTypes = map[string]bool{"": true, DefaultFsType: true}

type stageArgs struct {
	volumeID, stagingPath string
	block, readonly       bool
	fsType                string
	mountFlags            []string
	epoch                 uint64
}

type publishArgs struct {
	volumeID, stagingPath, targetPath string
	block, readonly                   bool
	podUID, podName, podNamespace     string
}

func checkPath(field, p string) error {
	if p == "" {
		return invalid("%s is missing", field)
	}
	if !filepath.IsAbs(p) {
		return invalid("%s %q is not an absolute path", field, p)
	}
	return nil
}

// volumeAccess is what a checked capability asks of the node.
type volumeAccess struct {
	block  bool
	fsType string
	flags  []string
	// readonly: a reader mode. The filesystem is mounted read-only, every
	// publish is read-only, and the datapath grant refuses writes anyway.
	readonly bool
}

// checkCapability validates a volume capability, tells Block from Filesystem
// and decides, with the controller's vcsi.GrantUse, whether the access mode
// allows this access type at all: a multi-node writer mode with mount access is
// refused here too, so a filesystem is never mounted read-write on two nodes
// even when a request slipped past the controller.
func checkCapability(c *csi.VolumeCapability) (volumeAccess, error) {
	if c == nil {
		return volumeAccess{}, invalid("volume_capability is missing")
	}
	mode := c.GetAccessMode().GetMode()
	if c.GetAccessMode() == nil || mode == csi.VolumeCapability_AccessMode_UNKNOWN {
		return volumeAccess{}, invalid("volume_capability.access_mode is missing or UNKNOWN")
	}
	var a volumeAccess
	switch {
	case c.GetBlock() != nil:
		a.block = true
	case c.GetMount() != nil:
		fs := c.GetMount().GetFsType()
		if !supportedFsTypes[fs] {
			return volumeAccess{}, invalid("volume_capability.mount.fs_type %q is not supported; allowed: %q (the default)", fs, DefaultFsType)
		}
		if fs == "" {
			fs = DefaultFsType
		}
		a.fsType, a.flags = fs, c.GetMount().GetMountFlags()
	default:
		return volumeAccess{}, invalid("volume_capability has neither block nor mount access type")
	}
	use, err := vcsi.GrantUse(mode, a.block)
	if err != nil {
		return volumeAccess{}, invalid("volume_capability.%v", err)
	}
	a.readonly = use == datapath.UseReadOnly
	return a, nil
}

func checkStage(req *csi.NodeStageVolumeRequest) (stageArgs, error) {
	if req.GetVolumeId() == "" {
		return stageArgs{}, invalid("volume_id is missing")
	}
	if err := checkPath("staging_target_path", req.GetStagingTargetPath()); err != nil {
		return stageArgs{}, err
	}
	acc, err := checkCapability(req.GetVolumeCapability())
	if err != nil {
		return stageArgs{}, err
	}
	raw, ok := req.GetPublishContext()[vigil.PublishContextEpochKey]
	if !ok {
		return stageArgs{}, invalid("publish_context[%q] is missing: staging needs the epoch of the grant made by ControllerPublishVolume", vigil.PublishContextEpochKey)
	}
	epoch, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return stageArgs{}, invalid("publish_context[%q] = %q is not a decimal epoch (uint64)", vigil.PublishContextEpochKey, raw)
	}
	return stageArgs{
		volumeID: req.GetVolumeId(), stagingPath: filepath.Clean(req.GetStagingTargetPath()),
		block: acc.block, fsType: acc.fsType, mountFlags: acc.flags, readonly: acc.readonly, epoch: epoch,
	}, nil
}

func checkPublish(req *csi.NodePublishVolumeRequest) (publishArgs, error) {
	if req.GetVolumeId() == "" {
		return publishArgs{}, invalid("volume_id is missing")
	}
	if err := checkPath("staging_target_path", req.GetStagingTargetPath()); err != nil {
		return publishArgs{}, err
	}
	if err := checkPath("target_path", req.GetTargetPath()); err != nil {
		return publishArgs{}, err
	}
	acc, err := checkCapability(req.GetVolumeCapability())
	if err != nil {
		return publishArgs{}, err
	}
	vc := req.GetVolumeContext()
	return publishArgs{
		volumeID: req.GetVolumeId(), stagingPath: filepath.Clean(req.GetStagingTargetPath()),
		targetPath: filepath.Clean(req.GetTargetPath()), block: acc.block, readonly: req.GetReadonly() || acc.readonly,
		podUID: vc[podUIDKey], podName: vc[podNameKey], podNamespace: vc[podNamespaceKey],
	}, nil
}

func checkVolumeAndPath(volumeID, pathField, path string) (string, error) {
	if volumeID == "" {
		return "", invalid("volume_id is missing")
	}
	if err := checkPath(pathField, path); err != nil {
		return "", err
	}
	return filepath.Clean(path), nil
}
