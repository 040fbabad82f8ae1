package sandbox

import (
	"slices"
	"strings"
	"testing"
)

// TestRealEngine_ServesUnderTheKubeletsPluginsDir: a real node's engine is
// the kwok node's, its CSI socket moved under the kubelet's plugins
// directory and its registration turned on in the kubelet's
// plugins_registry, its state in the node's /var/lib, all in the node's
// mount namespace; nothing else changes.
func TestRealEngine_ServesUnderTheKubeletsPluginsDir(t *testing.T) {
	kwok := ProcessSpec{Name: StackEngine, Args: []string{"vigil-engine-node", "run", "--node-name", "$VIGIL_NODE",
		"--csi-endpoint", NodeCSIEndpoint("$VIGIL_NODE_DIR"), "--kubelet-registration-dir=", "--heartbeat-interval", "1s"}}
	kwok.Args = append(kwok.Args, "--state-dir", "$VIGIL_NODE_DIR/engine")
	got := realEngine(kwok)
	want := []string{"unshare", "--mount", "--propagation", "unchanged", "--", "sh", "$VIGIL_NODE_DIR/node-mounts.sh",
		"vigil-engine-node", "run", "--node-name", "$VIGIL_NODE",
		"--csi-endpoint", "unix:///var/lib/kubelet/plugins/driver.vigil.io/csi.sock",
		"--kubelet-registration-dir=/var/lib/kubelet/plugins_registry", "--heartbeat-interval", "1s",
		"--state-dir", "/var/lib/vigil/engine-node"}
	if !slices.Equal(got.Args, want) {
		t.Errorf("real engine args\n %s\nwant\n %s", strings.Join(got.Args, " "), strings.Join(want, " "))
	}
	if got, want := realEngineEndpoint("/w/nodes/node-1"), "unix:///w/nodes/node-1/var-lib/kubelet/plugins/driver.vigil.io/csi.sock"; got != want {
		t.Errorf("the real engine's socket as the host sees it: %s, want %s", got, want)
	}
	if kwok.Args[5] != NodeCSIEndpoint("$VIGIL_NODE_DIR") {
		t.Errorf("realEngine changed the kwok spec it was given: %v", kwok.Args)
	}
	if len(realEngineEndpoint("/tmp/vigil-e2e-realloop/nodes/node-3")) > 107 {
		t.Errorf("the real engine's socket path is longer than a unix socket allows")
	}
}
