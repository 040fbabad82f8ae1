package sandbox

import (
	"fmt"
	"os"
	"path/filepath"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeRealNodeConfigs writes real node n's configuration files into its
// node directory: containerd's (ContainerdConfig: restrict_oom_score_adj,
// without which every pod sandbox fails in this VM; the pods' network
// namespaces under its state; runc's state in the run directory) and its
// wrapper's, the CNI network's, the kubelet's and its wrapper's, and
// kube-proxy's (with its identity, system:kube-proxy).
func writeRealNodeConfigs(st *state, n *nodeState, d realDirs) error {
	pki := filepath.Join(st.WorkDir, "kwok", "clusters", st.Name, "pki")
	if err := d.ctrd.WriteConfig(); err != nil {
		return fmt.Errorf("configure %s: %w", n.Name, err)
	}
	files := map[string]string{
		filepath.Join(d.node, "containerd-wrapper.sh"):          containerdWrapper(d),
		filepath.Join(d.ctrd.CNIConfDir(), "10-vigil.conflist"): cniConfig(n, d),
		filepath.Join(d.node, "kubelet.yaml"):                   kubeletConfig(st, n, d, filepath.Join(pki, "ca.crt")),
		filepath.Join(d.node, "kube-proxy.yaml"):                kubeProxyConfig(st, n, d),
		filepath.Join(d.node, "kubelet-wrapper.sh"):             kubeletWrapper(d),
		filepath.Join(d.node, nodeMountsScript):                 nodeMountsWrapper(d),
	}
	for path, body := range files {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return fmt.Errorf("configure %s: %w", n.Name, err)
		}
	}
	path := filepath.Join(d.node, "kube-proxy.kubeconfig")
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	const user = "system:kube-proxy" // bound to system:node-proxier by Kubernetes' default RBAC
	certPEM, keyPEM, err := signClientCert(pki, user, "vigil-sandbox:kube-proxies")
	if err != nil {
		return fmt.Errorf("identity of %s's kube-proxy: %w", n.Name, err)
	}
	return writeKubeconfig(st, path, user, fmt.Sprintf("https://%s:%d", n.HostIP, st.APIServerPort),
		&clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM})
}

// cniConfig is the node's pod network: a bridge in the node's namespace,
// the node's /24 (address leases in the run directory: a boot forgets them),
// a default route through the bridge. Nothing is masqueraded: the host
// routes each node's pods (setupRealNodeNet).
func cniConfig(n *nodeState, d realDirs) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": %q,
  "plugins": [{
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": %q}]],
      "routes": [{"dst": "0.0.0.0/0"}],
      "dataDir": %q
    }
  }]
}
`, n.NetNS, n.PodCIDR, filepath.Join(d.run, "cni-ipam"))
}

// kubeletConfig is the kubelet's KubeletConfiguration. What this machine
// needs (cgroup v1, no systemd): the cgroupfs driver, no QoS cgroups and no
// node-allocatable enforcement, swap and cgroup v1 accepted. Its files stay
// under the node's directory. Disk-pressure eviction and image garbage
// collection are off: the imported images cannot be pulled again.
// nodeStatusUpdateFrequency is the kubelet's default unless
// Config.NodeStatusUpdateFrequency sets it.
func kubeletConfig(st *state, n *nodeState, d realDirs, clientCA string) string {
	extra := ""
	if f := st.NodeStatusUpdateFrequency; f > 0 {
		extra = fmt.Sprintf("nodeStatusUpdateFrequency: %s\n", f)
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /%[6]s
cgroupsPerQOS: true
enforceNodeAllocatable: []
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://%[1]s
podLogsDir: %[2]q
volumePluginDir: %[3]q
nodeLeaseDurationSeconds: %[4]d
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[5]q}
authorization: {mode: Webhook}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
  imagefs.inodesFree: 1%%
`, d.socket(), d.pods, filepath.Join(d.node, "volume-plugins"), st.LeaseSeconds, clientCA, n.Cgroup) + extra
}

// kubeProxyConfig is kube-proxy's configuration: nftables mode, in the
// node's namespace; the machine-wide conntrack settings are left alone.
func kubeProxyConfig(st *state, n *nodeState, d realDirs) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %q
hostnameOverride: %q
mode: nftables
clusterCIDR: %q
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, filepath.Join(d.node, "kube-proxy.kubeconfig"), n.Name, st.podSubnet())
}
