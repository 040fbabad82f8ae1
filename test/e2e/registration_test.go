package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	enginenode "github.com/vigil-storage/vigil/engine-node"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/images"
)

// TestRealNodes_EngineRegistersWithKubelet brings up one real node (kubelet,
// containerd, CNI, kube-proxy) and starts bin/vigil-engine-node in its
// network namespace, with its CSI socket under the kubelet's plugins
// directory and --kubelet-registration-dir the kubelet's plugins_registry,
// as a DaemonSet would: the kubelet registers driver.vigil.io (its CSINode
// lists the driver with the node's id, its log says so) without any
// node-driver-registrar. The engine has no datapath (an address nobody
// serves): registration and NodeGetInfo do not need one; its heartbeats
// fail meanwhile.
func TestRealNodes_EngineRegistersWithKubelet(t *testing.T) {
	requireRealNodes(t)
	ctx := context.Background()
	t0 := time.Now()
	nodeImages, pause := realNodeImages(t, images.Pause)
	s := upRealNodes(t, sandbox.Config{Name: "e2e-reg", WorkDir: filepath.Join(os.TempDir(), "vigil-e2e-reg"), Nodes: 1,
		NodeImages: nodeImages, PauseImage: pause, Subnet: "10.213.130.0/24", PodSubnet: "10.216.0.0/16"}, 2*time.Minute)
	const node = "node-1"
	root := s.KubeletRoot(node)
	regDir := filepath.Join(root, "plugins_registry")
	sock := filepath.Join(root, "plugins", vigil.DriverName, "csi.sock")
	engineDir := filepath.Join(s.NodeDir(node), "engine")
	must(t, os.MkdirAll(engineDir, 0o755))
	token := filepath.Join(engineDir, "token")
	must(t, os.WriteFile(token, []byte("unused: no datapath serves this engine\n"), 0o600))
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", "vigil-engine-node"))
	must(t, err)
	t1 := time.Now()
	must(t, s.RunOnNode(node, sandbox.ProcessSpec{Name: "engine", Args: []string{bin, "run",
		"--node-name", node, "--datapath", "127.0.0.1:9", "--datapath-token-file", token,
		"--state-dir", filepath.Join(engineDir, "state"), "--csi-endpoint", "unix://" + sock,
		"--kubelet-registration-dir", regDir, "--metrics-address", "", "--fd-keeper-socket", "",
		"--writeback-guard", enginenode.WritebackGuardOff, "--graceful-leave", "0s"}}))
	engineLog := filepath.Join(s.NodeDir(node), "engine.log")
	kubeletLog := filepath.Join(s.NodeDir(node), sandbox.NodeKubelet+".log")
	c := s.Client()
	must(t, sandbox.Poll(ctx, 30*time.Second, "CSINode "+node+" listing "+vigil.DriverName+" and the engine told so by the kubelet",
		func(ctx context.Context) (bool, string, error) {
			cn, err := c.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			var names []string
			for _, d := range cn.Spec.Drivers {
				names = append(names, d.Name)
				if d.Name == vigil.DriverName && d.NodeID == node {
					// The kubelet tells the engine after it wrote the CSINode.
					told := grepFile(engineLog, "the kubelet registered the CSI driver", 1) != ""
					return told, "CSINode lists it; the engine's log does not say the kubelet told it yet", nil
				}
			}
			return false, fmt.Sprintf("drivers %v", names), nil
		}, func(context.Context) string {
			return "engine log:\n" + tail(engineLog, 20) + "\nkubelet log (driver lines):\n" + grepFile(kubeletLog, vigil.DriverName, 20)
		}))
	t.Logf("the kubelet registered %s %.1fs after the engine started (%.1fs with the image and the node)",
		vigil.DriverName, time.Since(t1).Seconds(), time.Since(t0).Seconds())
	if got := grepFile(kubeletLog, "Register new plugin with name: "+vigil.DriverName, 1); got == "" {
		t.Errorf("kubelet log %s does not say it registered %s:\n%s", kubeletLog, vigil.DriverName, grepFile(kubeletLog, vigil.DriverName, 20))
	} else {
		t.Logf("kubelet: %s", got)
	}
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	must(t, err)
	if !strings.Contains(n.Annotations["csi.volume.kubernetes.io/nodeid"], vigil.DriverName) {
		t.Errorf("Node %s annotation csi.volume.kubernetes.io/nodeid = %q, want %s's node id", node, n.Annotations["csi.volume.kubernetes.io/nodeid"], vigil.DriverName)
	}
}

// tail is the last n lines of file.
func tail(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// grepFile is the first n lines of file holding s.
func grepFile(file, s string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) && len(out) < n {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
