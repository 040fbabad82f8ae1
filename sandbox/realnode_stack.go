package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	vigil "github.com/vigil-storage/vigil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// On a real node the stack's engine is the kubelet's CSI node plugin, as a
// DaemonSet's would be: it runs in the node's mount namespace (the node's own
// /var/lib at /var/lib, InNodeMounts), its socket under the kubelet's plugins
// directory, its registration socket in the kubelet's plugins_registry and
// its state in the node's /var/lib, so that the kubelet finds it, registers
// driver.vigil.io (the CSINode and the Node's nodeid annotation are the
// kubelet's doing) and stages, publishes and unpublishes Vigil volumes itself,
// at the paths it sees. The node's /var/lib is a shared mount: the engine's
// mounts there are the host's and the kubelet's too, and a power cut takes
// them down with the node's. No kubelet stand-in runs.

// Where the engine of a real node serves, registers and keeps its state, in
// the node's view (under MachineKubeletRoot and the node's /var/lib).
const (
	realEngineSocket    = MachineKubeletRoot + "/plugins/" + vigil.DriverName + "/csi.sock"
	realRegistrationDir = MachineKubeletRoot + "/plugins_registry"
	realEngineStateDir  = machineVarLib + "/vigil/engine-node"
)

// realEngineEndpoint is the CSI socket of the engine of a real node whose
// directory is nodeDir, as the host sees it.
func realEngineEndpoint(nodeDir string) string {
	rel, _ := filepath.Rel(machineVarLib, realEngineSocket)
	return "unix://" + filepath.Join(nodeDir, varLibDir, rel)
}

// EngineEndpoint is the CSI socket of node's engine (StartStack), as the host
// sees it: under the kubelet's plugins directory on a real node, else in the
// node's engine directory, where the kubelet stand-in calls it.
func (s *Sandbox) EngineEndpoint(node string) (string, error) {
	_, n, err := s.loadNode(node)
	if err != nil {
		return "", err
	}
	if n.real() {
		return realEngineEndpoint(n.dir(s.workDir)), nil
	}
	return NodeCSIEndpoint(n.dir(s.workDir)), nil
}

// PodVolumeDir is where pod podUID's volume pv is published on node, as the
// host sees it: under the real kubelet's root directory on a real node,
// under the kubelet stand-in's (the node directory's kubelet/) on a kwok
// node; the same layout, the kubelet's.
func (s *Sandbox) PodVolumeDir(node string, podUID types.UID, pv string) string {
	root := filepath.Join(s.NodeDir(node), "kubelet")
	if st, err := loadState(s.workDir); err == nil && st.Kubelet == KubeletReal {
		root = s.KubeletRoot(node)
	}
	return filepath.Join(root, "pods", string(podUID), "volumes", "kubernetes.io~csi", pv, "mount")
}

// realEngine is the engine of a real node: the kwok node's engine started
// in the node's mount namespace (InNodeMounts), with its CSI socket under the
// kubelet's plugins directory, registered with the kubelet
// (--kubelet-registration-dir), its state in the node's /var/lib.
func realEngine(engine ProcessSpec) ProcessSpec {
	args := append([]string{}, engine.Args...)
	for i, a := range args {
		switch {
		case a == "--csi-endpoint" && i+1 < len(args):
			args[i+1] = "unix://" + realEngineSocket
		case a == "--state-dir" && i+1 < len(args):
			args[i+1] = realEngineStateDir
		case strings.HasPrefix(a, "--kubelet-registration-dir="):
			args[i] = "--kubelet-registration-dir=" + realRegistrationDir
		}
	}
	engine.Args = append(InNodeMounts("$VIGIL_NODE_DIR"), args...)
	return engine
}

// waitRegistered waits until the kubelet of every node registered
// driver.vigil.io: its CSINode lists the driver with the node as its id, as
// the external-attacher needs before it attaches there.
func (s *Sandbox) waitRegistered(ctx context.Context, nodes []string, timeout time.Duration) error {
	return Poll(ctx, timeout, "every real node's kubelet registered "+vigil.DriverName, func(ctx context.Context) (bool, string, error) {
		var missing []string
		for _, node := range nodes {
			cn, err := s.client.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
			found := false
			if err == nil {
				for _, d := range cn.Spec.Drivers {
					found = found || (d.Name == vigil.DriverName && d.NodeID == node)
				}
			}
			if !found {
				missing = append(missing, node)
			}
		}
		return len(missing) == 0, fmt.Sprintf("not yet on %v", missing), nil
	}, func(context.Context) string {
		var b strings.Builder
		for _, node := range nodes {
			log, _ := os.ReadFile(filepath.Join(s.NodeDir(node), StackEngine+".log"))
			fmt.Fprintf(&b, "--- %s's engine log\n%s\n", node, lastLines(string(log), 10))
		}
		return b.String()
	})
}
