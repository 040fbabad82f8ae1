package csi

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/vigil-storage/vigil/datapath"
)

// checkName checks a volume name: present, at most datapath.MaxNameLen bytes,
// UTF-8 without control characters.
func checkName(name string) error {
	switch {
	case name == "":
		return invalidArgument("name is empty; give the volume a name (the CO uses the PV name)")
	case len(name) > datapath.MaxNameLen:
		return invalidArgument("name %.20q... is %d bytes long; at most %d are allowed", name, len(name), datapath.MaxNameLen)
	case !utf8.ValidString(name):
		return invalidArgument("name %q is not valid UTF-8", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return invalidArgument("name %q contains the control character %U; use printable characters", name, r)
		}
	}
	return nil
}

// checkCreateVolume checks a CreateVolume request completely and returns the
// datapath access mode and the size the volume will get.
func checkCreateVolume(req *csi.CreateVolumeRequest) (datapath.AccessMode, int64, error) {
	if err := checkName(req.GetName()); err != nil {
		return "", 0, err
	}
	mode, err := checkCapabilities("volume_capabilities", req.GetVolumeCapabilities())
	if err != nil {
		return "", 0, err
	}
	if err := checkParameters(req.GetParameters()); err != nil {
		return "", 0, err
	}
	if req.GetVolumeContentSource() != nil {
		return "", 0, invalidArgument("volume_content_source is set; Vigil creates empty volumes only (no snapshots, no clones)")
	}
	if len(req.GetMutableParameters()) > 0 {
		return "", 0, invalidArgument("mutable_parameters are set; Vigil has no modifiable volume attributes")
	}
	size, err := sizeFor(req.GetCapacityRange())
	if err != nil {
		return "", 0, err
	}
	return mode, size, nil
}

// checkPublish checks a ControllerPublishVolume request.
func checkPublish(req *csi.ControllerPublishVolumeRequest) error {
	switch {
	case req.GetVolumeId() == "":
		return invalidArgument("volume_id is empty; give the id CreateVolume returned")
	case req.GetNodeId() == "":
		return invalidArgument("node_id is empty; give the node id NodeGetInfo returned")
	case len(req.GetNodeId()) > datapath.MaxNodeLen:
		return invalidArgument("node_id %.20q... is %d bytes long; at most %d are allowed", req.GetNodeId(), len(req.GetNodeId()), datapath.MaxNodeLen)
	case req.GetReadonly():
		return invalidArgument("readonly is true; Vigil does not offer PUBLISH_READONLY, mount read-only in NodePublishVolume instead")
	}
	return checkCapability("volume_capability", req.GetVolumeCapability())
}

// checkCapabilityShapes checks that caps is not empty and that every capability
// is well formed (access mode and access type present). Whether Vigil supports
// what a well-formed capability asks is a separate question.
func checkCapabilityShapes(field string, caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return invalidArgument("%s is empty; give at least one capability (access mode and block or mount)", field)
	}
	for i, c := range caps {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case c == nil:
			return invalidArgument("%s is missing; give an access mode and an access type (block or mount)", f)
		case c.GetAccessMode() == nil:
			return invalidArgument("%s.access_mode is missing; allowed modes: %s", f, allowedAccessModes())
		case c.GetAccessType() == nil:
			return invalidArgument("%s.access_type is missing; set block or mount", f)
		}
	}
	return nil
}
