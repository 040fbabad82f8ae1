package csi

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
)

const (
	// DefaultVolumeSize is the size of a volume whose request names no capacity.
	DefaultVolumeSize int64 = 1 << 30
	// SizeAlignment is the granularity of volume sizes: requests are rounded up
	// to a multiple of it, as long as the limit allows.
	SizeAlignment int64 = 4096
	// parameterPrefixKubernetes is the prefix of the parameters the
	// external-provisioner adds itself (--extra-create-metadata); they are
	// accepted and ignored.
	parameterPrefixKubernetes = "csi.storage.k8s.io/"
)

// SupportedFsTypes are the file systems a mount volume may ask for; "" lets the
// node service choose (ext4). They match what the engine-node's node service
// stages, so a StorageClass asking for another file system fails at
// CreateVolume, with a clear message, instead of at mount time on a node.
var SupportedFsTypes = []string{"", "ext4"}

// accessModeFor maps each CSI access mode Vigil supports to the datapath mode
// it needs: single-node modes are RWO, multi-node modes RWX.
var accessModeFor = map[csi.VolumeCapability_AccessMode_Mode]datapath.AccessMode{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:        datapath.AccessRWO,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:   datapath.AccessRWO,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER: datapath.AccessRWO,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:  datapath.AccessRWO,
	csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:    datapath.AccessRWX,
	csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER:  datapath.AccessRWX,
	csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:   datapath.AccessRWX,
}

// allowedAccessModes is the list printed when an access mode is refused.
func allowedAccessModes() string {
	names := make([]string, 0, len(accessModeFor))
	for m := range accessModeFor {
		names = append(names, m.String())
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// checkCapability checks one capability: an access mode Vigil knows, exactly
// one access type (block, or mount with a supported fs type), and a pair of the
// two that GrantUse allows (no multi-node writer with mount). field names it in
// the error ("volume_capabilities[2]").
func checkCapability(field string, c *csi.VolumeCapability) error {
	if c == nil {
		return invalidArgument("%s is missing; give an access mode and an access type (block or mount)", field)
	}
	if c.GetAccessMode() == nil {
		return invalidArgument("%s.access_mode is missing; allowed modes: %s", field, allowedAccessModes())
	}
	mode := c.GetAccessMode().GetMode()
	if _, ok := accessModeFor[mode]; !ok {
		return invalidArgument("%s.access_mode %s is not supported; allowed modes: %s", field, mode, allowedAccessModes())
	}
	switch t := c.GetAccessType().(type) {
	case *csi.VolumeCapability_Block:
	case *csi.VolumeCapability_Mount:
		fs := t.Mount.GetFsType()
		if !slices.Contains(SupportedFsTypes, fs) {
			return invalidArgument("%s.mount.fs_type %q is not supported; allowed: %q", field, fs, SupportedFsTypes)
		}
	default:
		return invalidArgument("%s.access_type is missing; set block or mount", field)
	}
	if _, err := grantUseOf(c); err != nil {
		return invalidArgument("%s.%v", field, err)
	}
	return nil
}

// checkCapabilities checks a non-empty list of capabilities and returns the
// datapath access mode they need together: RWX if any of them is multi-node.
func checkCapabilities(field string, caps []*csi.VolumeCapability) (datapath.AccessMode, error) {
	if len(caps) == 0 {
		return "", invalidArgument("%s is empty; give at least one capability (access mode and block or mount)", field)
	}
	mode := datapath.AccessRWO
	for i, c := range caps {
		if err := checkCapability(fmt.Sprintf("%s[%d]", field, i), c); err != nil {
			return "", err
		}
		if accessModeFor[c.GetAccessMode().GetMode()] == datapath.AccessRWX {
			mode = datapath.AccessRWX
		}
	}
	return mode, nil
}

// compatible reports whether a volume created with access mode have can serve
// capability c: an RWX volume serves every mode, an RWO volume only single-node
// modes.
func compatible(have datapath.AccessMode, c *csi.VolumeCapability) bool {
	need := accessModeFor[c.GetAccessMode().GetMode()]
	return have == datapath.AccessRWX || need == datapath.AccessRWO
}

// sizeFor picks the size of a new volume from a capacity range: the required
// bytes (or DefaultVolumeSize, capped by the limit) rounded up to SizeAlignment,
// never above the limit. A range that no aligned size satisfies is InvalidArgument
// when it contradicts itself and OutOfRange when it is merely too small to align.
func sizeFor(r *csi.CapacityRange) (int64, error) {
	req, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	switch {
	case req < 0:
		return 0, invalidArgument("capacity_range.required_bytes is %d; it must be 0 (no minimum) or positive", req)
	case limit < 0:
		return 0, invalidArgument("capacity_range.limit_bytes is %d; it must be 0 (no limit) or positive", limit)
	case limit > 0 && req > limit:
		return 0, invalidArgument("capacity_range.required_bytes %d exceeds capacity_range.limit_bytes %d", req, limit)
	}
	size := req
	if size == 0 {
		size = DefaultVolumeSize
		if limit > 0 && limit < size {
			size = limit
		}
	}
	if size > datapath.MaxVolumeSize {
		return 0, outOfRange("capacity_range.required_bytes %d exceeds the largest volume Vigil makes, %d bytes", size, datapath.MaxVolumeSize)
	}
	aligned := alignUp(size)
	if limit > 0 && aligned > limit {
		aligned = limit / SizeAlignment * SizeAlignment
		if aligned < max(req, 1) {
			return 0, outOfRange("capacity_range [%d, %d] holds no multiple of %d bytes; volume sizes are multiples of %d",
				req, limit, SizeAlignment, SizeAlignment)
		}
	}
	return aligned, nil
}

// alignUp rounds n up to a multiple of SizeAlignment.
func alignUp(n int64) int64 {
	return (n + SizeAlignment - 1) / SizeAlignment * SizeAlignment
}

// inRange reports whether size satisfies a capacity range.
func inRange(size int64, r *csi.CapacityRange) bool {
	if size < r.GetRequiredBytes() {
		return false
	}
	return r.GetLimitBytes() == 0 || size <= r.GetLimitBytes()
}

// checkParameters refuses StorageClass parameters Vigil does not know, so a typo
// in a StorageClass fails loudly instead of being ignored, and a bad value of
// one it knows (replicas). The provisioner's csi.storage.k8s.io/ keys pass.
func checkParameters(params map[string]string) error {
	var unknown []string
	for k := range params {
		if k != ParameterReplicas && !strings.HasPrefix(k, parameterPrefixKubernetes) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return invalidArgument("parameters %q are not supported; %s accepts the StorageClass parameter %q and %s*",
			unknown, vigil.DriverName, ParameterReplicas, parameterPrefixKubernetes)
	}
	if v, ok := params[ParameterReplicas]; ok {
		_, err := parseReplicas(v)
		return err
	}
	return nil
}
