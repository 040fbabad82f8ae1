package kubelet

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
)

// phase of a stage or a publish in the actual state.
type phase string

const (
	// phaseUncertain: the call was made and did not succeed (or its outcome is
	// unknown); the volume may be mounted and must be taken down before it is
	// forgotten. The kubelet's "uncertain" mount state.
	phaseUncertain phase = "uncertain"
	// phaseDone: the call succeeded.
	phaseDone phase = "done"
)

// actualPub is a publish of a volume for a pod.
type actualPub struct {
	Pod        podRef `json:"pod"`
	TargetPath string `json:"targetPath"`
	Phase      phase  `json:"phase"`
}

// actualVolume is what this node has done with one volume.
type actualVolume struct {
	Handle      string `json:"handle"`
	PVName      string `json:"pvName"`
	Block       bool   `json:"block"`
	StagingPath string `json:"stagingPath"`
	// Stage is "" when NodeStageVolume was never called (or the driver does not
	// stage), else the phase of the last stage.
	Stage phase `json:"stage,omitempty"`
	// StagedContext is the publish context of the last successful stage.
	StagedContext map[string]string        `json:"stagedContext,omitempty"`
	Pubs          map[types.UID]*actualPub `json:"pubs,omitempty"`
}

func (a *actualVolume) clone() *actualVolume {
	c := *a
	c.StagedContext = maps.Clone(a.StagedContext)
	c.Pubs = make(map[types.UID]*actualPub, len(a.Pubs))
	for uid, p := range a.Pubs {
		cp := *p
		c.Pubs[uid] = &cp
	}
	return &c
}

// empty: nothing of the volume is (or may be) mounted here any more.
func (a *actualVolume) empty() bool { return a.Stage == "" && len(a.Pubs) == 0 }

// actualState is the actual state of the node's volumes, by handle, kept in a
// JSON file so a restarted stand-in still takes down what its predecessor
// mounted (the kubelet reconstructs the same from its pod directories).
type actualState struct {
	path    string
	Volumes map[string]*actualVolume `json:"volumes"`
}

// stateFile is the file under RootDir that holds the actual state.
const stateFile = "vigil-kubelet-state.json"

// loadActual reads the state file under root; a missing file is an empty state.
func loadActual(root string) (*actualState, error) {
	s := &actualState{path: filepath.Join(root, stateFile), Volumes: map[string]*actualVolume{}}
	b, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read kubelet state %s: %w", s.path, err)
	}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("read kubelet state %s: %w (remove the file only if nothing is mounted under %s)", s.path, err, root)
	}
	if s.Volumes == nil {
		s.Volumes = map[string]*actualVolume{}
	}
	for _, v := range s.Volumes {
		if v.Pubs == nil {
			v.Pubs = map[types.UID]*actualPub{}
		}
		// Whatever a previous run did may be gone (a reboot unmounts
		// everything, and the node service forgets it): it is all uncertain,
		// staged and published again for the pods still here (the calls are
		// idempotent) and taken down for the others, as the kubelet does
		// with the volumes it reconstructs.
		if v.Stage != "" {
			v.Stage = phaseUncertain
		}
		for _, p := range v.Pubs {
			p.Phase = phaseUncertain
		}
	}
	return s, nil
}

// save writes the state atomically (temp file, fsync, rename).
func (s *actualState) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o750); err != nil {
		return fmt.Errorf("save kubelet state: %w", err)
	}
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("save kubelet state: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err != nil {
		return fmt.Errorf("save kubelet state %s: %w", s.path, err)
	}
	return nil
}

// snapshot deep-copies the volumes for a decision.
func (s *actualState) snapshot() map[string]*actualVolume {
	out := make(map[string]*actualVolume, len(s.Volumes))
	for h, v := range s.Volumes {
		out[h] = v.clone()
	}
	return out
}

// volume returns the entry of handle, creating it from spec.
func (s *actualState) volume(spec volumeSpec, stagingPath string) *actualVolume {
	v := s.Volumes[spec.Handle]
	if v == nil {
		v = &actualVolume{Handle: spec.Handle, PVName: spec.PVName, Block: spec.Block,
			StagingPath: stagingPath, Pubs: map[types.UID]*actualPub{}}
		s.Volumes[spec.Handle] = v
	}
	return v
}

// Paths, laid out as the kubelet lays them out.

// StagingPath is where a volume is staged on the node rooted at root:
// plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount for a
// Filesystem volume, plugins/kubernetes.io/csi/volumeDevices/staging/<pv> for
// a Block volume.
func StagingPath(root, driver, handle, pvName string, block bool) string {
	if block {
		return filepath.Join(root, "plugins/kubernetes.io/csi/volumeDevices/staging", pvName)
	}
	return filepath.Join(root, "plugins/kubernetes.io/csi", driver, fmt.Sprintf("%x", sha256.Sum256([]byte(handle))), "globalmount")
}

// TargetPath is where a volume is published for a pod:
// pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount for a Filesystem volume,
// plugins/kubernetes.io/csi/volumeDevices/publish/<pv>/<uid> for a Block volume.
func TargetPath(root string, podUID types.UID, pvName string, block bool) string {
	if block {
		return filepath.Join(root, "plugins/kubernetes.io/csi/volumeDevices/publish", pvName, string(podUID))
	}
	return filepath.Join(root, "pods", string(podUID), "volumes/kubernetes.io~csi", pvName, "mount")
}

// UniqueVolumeName is the name of a CSI volume in node.status.volumesInUse.
func UniqueVolumeName(driver, handle string) string {
	return "kubernetes.io/csi/" + driver + "^" + handle
}
