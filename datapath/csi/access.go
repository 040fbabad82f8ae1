package csi

import (
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/vigil-storage/vigil/datapath"
)

// readerModes are the access modes whose nodes only read.
var readerModes = map[csi.VolumeCapability_AccessMode_Mode]bool{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY: true,
	csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:  true,
}

// multiNodeWriterModes are the access modes that let several nodes write.
var multiNodeWriterModes = map[csi.VolumeCapability_AccessMode_Mode]bool{
	csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER: true,
	csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:  true,
}

// GrantUse decides what a node does with a volume it uses in access mode
// mode, through a raw block device (block) or a filesystem mount, and so the
// use of its datapath grant:
//
//	mode                      block   mount
//	single-node writer modes  rw      rw-fs
//	*_READER_ONLY             ro      ro (mounted read-only)
//	MULTI_NODE_*_WRITER       rw      refused
//
// A filesystem such as ext4 mounted read-write on two nodes is corrupted, so
// multi-node writers get raw block devices only, whose applications coordinate
// as on any shared disk. The error names the mode and what is allowed; the
// caller puts the field name in front ("volume_capability.").
//
// The controller service and the node service both decide with it, so a
// request that slips past one is refused by the other.
func GrantUse(mode csi.VolumeCapability_AccessMode_Mode, block bool) (datapath.GrantUse, error) {
	switch {
	case readerModes[mode]:
		return datapath.UseReadOnly, nil
	case block:
		return datapath.UseReadWrite, nil
	case multiNodeWriterModes[mode]:
		return "", fmt.Errorf("access_mode %s with mount access is not supported: a filesystem mounted read-write on more than one node is corrupted; "+
			"allowed are block access (volumeMode: Block) for multi-node writers, whose applications coordinate their writes, "+
			"MULTI_NODE_READER_ONLY with mount, which is mounted read-only, and the single-node modes with mount", mode)
	}
	return datapath.UseFilesystemWriter, nil
}

// grantUseOf is GrantUse for a capability checkCapability accepted.
func grantUseOf(c *csi.VolumeCapability) (datapath.GrantUse, error) {
	return GrantUse(c.GetAccessMode().GetMode(), c.GetBlock() != nil)
}
