// Package sandbox runs a real local Kubernetes cluster whose nodes can be powered
// off and cut off, for the end-to-end tests and for bin/vigil-sandbox.
//
// The control plane is real: etcd, kube-apiserver, kube-controller-manager (node
// lifecycle, taint eviction, StatefulSet and ReplicaSet controllers, attach-detach,
// PodGC) and kube-scheduler, built from pinned Go modules by `make testbin`
// (sandbox/tools: pins.env holds every version, one tools module per upstream
// project, binaries cached by version outside the repository, see BinDir) and run by
// kwokctl's binary runtime with its kwok-controller disabled. Node-monitor timings
// and the default NoExecute tolerations are configurable (Config).
//
// `make testbin` also builds the kubelet and kube-proxy of real nodes (see
// Real nodes), and the upstream CSI sidecars csi-attacher and
// csi-provisioner (BinCSIAttacher, BinCSIProvisioner in BinDir), which StartStack
// runs on the host beside Vigil's CSI controller.
// external-provisioner is pinned at v6.3.0: v6.4.0 needs
// sig-storage-lib-external-provisioner v13.1.0, which the module proxy refuses.
//
// Each node is simulated by its own kwok process, label-selected (vigil.io/node=NAME),
// which is that node's kubelet: it keeps the Node Ready and its lease renewed, and
// runs its pods. Node objects carry volumes.kubernetes.io/controller-managed-attach-
// detach=true so that the attach-detach controller creates VolumeAttachments.
//
// # Real nodes
//
// With Config.Kubelet KubeletReal (`vigil-sandbox up --kubelet real`) each
// node is a machine of its own instead: a real kubelet and kube-proxy
// (BinKubelet, BinKubeProxy, built by `make testbin` in the same go build as
// the control plane), containerd and runc (Debian's), and a CNI bridge
// (Debian's containernetworking-plugins); pods run in containers of images
// imported from tarballs (Config.NodeImages; no registry), their sandbox
// Config.PauseImage. The node keeps its network namespace and link, and gets
// what a machine would have to itself (realnode.go, realnode_config.go):
//
//   - directories: under its node directory, containerd's root (kept across
//     boots, like a disk), a run directory emptied at each boot like a tmpfs
//     (containerd's state and socket, runc's state, the pods' network
//     namespaces, the CNI address leases), a /var/lib of its own (kept, like
//     a disk) holding the kubelet's root directory, its pods' logs and its
//     volume plugins;
//   - a cgroup, vigil-SANDBOX-node-N in every hierarchy (cgroup.go): the
//     sandbox starts every process of the node in it, containerd's shims
//     inherit it, and the kubelet's cgroup root is it, so each pod's and
//     container's cgroup is under it (.../kubepods/...);
//   - its own /var/lib: the kubelet and containerd each run in a mount
//     namespace of their own in which the node's /var/lib directory is
//     /var/lib, so the kubelet's root directory is /var/lib/kubelet on every
//     node (MachineKubeletRoot; KubeletRoot is the host's path of it) and a
//     pod's hostPath under /var/lib (a CSI node plugin's state, its socket,
//     the plugin registration directory; MachineDir maps them) is its
//     node's. Every other mount of those namespaces is a slave of the
//     host's; the node's /var/lib and the kubelet's root in it are shared
//     mounts the host's namespace peers with, so what any of them mounts
//     there is seen by all: the pods' tokens the kubelet mounts, and the
//     staging and publishing of a CSI node plugin, whether a host process
//     or a container with Bidirectional propagation (which containerd
//     allows only on a shared mount: deploy/'s engine DaemonSet). A
//     registered process of the node gets the same view when its command
//     starts with InNodeMounts (a CSI node plugin run as a host process
//     must: the kubelet names paths under /var/lib/kubelet);
//   - in the kubelet's mount namespace each machine-wide sysctl the kubelet
//     sets at its start (vm.overcommit_memory, kernel.panic,
//     kernel.panic_on_oops, ...) shows the value it wants, so it changes
//     none of this machine's;
//   - in containerd's, its own mounts (the containers' root file systems,
//     the pods' network namespaces) stay in it and go with its last
//     process; /run/containerd (the shims' sockets) and /var/lib/cni
//     (libcni's cache), which containerd 1.6 and the CNI plugins use
//     whatever their configuration says, are directories of the node's run
//     directory. Nothing of a node is written under /var or /run of the
//     host;
//   - networking: a default route through the host end of its link; the
//     pod network, a /24 of Config.PodSubnet per node on a bridge in the
//     node's namespace, routed by the host to the node, with forwarding on
//     only for the node links' host ends (nothing is masqueraded); kube-proxy
//     in nftables mode, so pods reach the API server through the
//     `kubernetes` Service (ServiceIP, which the API server's certificate
//     names) at the advertised address, node-1's host end.
//
// A power cut SIGKILLs the node's registered processes and everything in its
// cgroup (containerd, its shims, every container, the kubelet, kube-proxy) in
// one pass, again until the cgroup is empty, then takes what the machine's
// power would take with it: its mounts (those under its /var/lib: the
// kubelet's, a CSI node plugin's; containerd's went with its namespace) and
// its cgroups. A boot starts
// it all again; the kubelet finds its pods' containers gone. Partitions cut
// the pods' packets too (the forward hook). Down leaves no process, mount,
// namespace or cgroup (Leftovers lists them). NodePIDs lists a real node's processes and
// ProcessIDs the whole sandbox's.
//
// With Vigil's stack (StartStack, `vigil-sandbox up --kubelet real --stack`)
// what runs where is:
//
//   - on the host, as on kwok nodes: the datapath, Vigil's CSI controller,
//     csi-provisioner and csi-attacher (host processes, not pods);
//   - in each node (its network namespace and its cgroup, started at each
//     boot, killed by its power cut): the fd keeper and vigil-engine-node,
//     the kubelet's CSI node plugin, in the node's mount namespace (its
//     /var/lib at /var/lib, as the kubelet's), with its socket under the
//     kubelet's plugins directory (EngineEndpoint), --kubelet-registration-dir
//     the kubelet's plugins_registry and its state in /var/lib/vigil. The
//     real kubelet registers driver.vigil.io (it writes the CSINode), and
//     stages, publishes, unpublishes and unstages Vigil volumes for its pods
//     at the paths it sees; no kubelet stand-in runs. The node's /var/lib is
//     a shared mount, so the kubelet, containerd and the host see the
//     engine's mounts, and a pod's container gets the volume;
//   - in containers: the pods, e.g. writers of the writer image
//     (Workload.WriterLedgerDir) acknowledging in a ledger on the host.
//
// The stack's CSI controller reads a managed settings overlay the stack writes
// (stack-dir/csi-settings): default-replica-count is one per datapath server,
// at most 3 (StackReplicaCount). The datapath on the host is one server, so its
// volumes have one copy; three servers on nodes (StackConfig.DatapathServers)
// make volumes of three copies by default, as deploy/'s three servers do,
// through the replicated create and the engine's fan-out. A volume of three
// copies needs three servers that answer when it is provisioned: a claim made
// while a server's node is off asks for fewer with a StorageClass parameter
// replicas "1" (TestDatapathServers/LeaderPowerCut does). The installed
// sandbox runs one server, and its overlay (deploy/overlays/sandbox) sets the
// count to 1 the same way.
//
// # Installing deploy/ on real nodes
//
// Install (`vigil-sandbox up --kubelet real --install`) is `kubectl apply -k`
// of deploy/overlays/sandbox (InstallOverlay, rendered from the copy of
// deploy/ built into the program, RenderDeploy) or of another kustomization:
// it refuses an image a node has not imported (the sandbox never pulls),
// creates the directory of each local PersistentVolume on its node's
// /var/lib (MachineDir), applies the namespaces and CRDs, then the rest, with
// server-side apply, and waits until every Deployment, StatefulSet and
// DaemonSet is Ready and every Job Complete, reporting each change of what a
// component waits on (a pod not scheduled and why, a container's waiting
// reason, the pod's last Warning). A component not ready in time fails it
// with an InstallError: the component, its pods' conditions and Events, its
// own Events. TestInstall_RealNodes runs it and the closed loop against it.
//
// # Nodes and the network
//
// Every node has a network namespace of its own (vigil-SANDBOX-node-N) joined to
// the host by a veth pair on addresses of Config.Subnet (default 10.213.0.0/16:
// node i gets host end 10.213.0.(4i+1) and node end .(4i+2), /30). The node's kwok
// and every process registered with AddProcess run inside that namespace, in a
// session of their own; they enter only the network namespace (nsenter --net), so
// they share the host's mounts (a node's staging and target paths are visible to
// the host and to its other processes, as on a real node). The control plane binds 127.0.0.1 only; a
// forwarder per node (socat, on the host) listens on the host end of the node's link
// and relays to the API server, whose certificate names those addresses; the
// per-node kubeconfig (VIGIL_KUBECONFIG) points there. No external address is used.
//
//   - Stop(node) is a power cut: SIGKILL to the process group of the node's kwok and
//     of every registered process, all sent before any is awaited.
//   - Start(node) boots the node again: a new boot id (VIGIL_BOOT_ID and
//     VIGIL_NODE_DIR/boot_id), then kwok and the registered processes.
//   - Partition(node, target) cuts the node off while its processes keep running:
//     from the API server only (PartitionAPIServer: kwok can no longer renew the
//     lease, the node goes NotReady, but its engine still reaches the datapath, a
//     zombie), from the datapath only (PartitionDatapath: the engine's heartbeats
//     and I/O time out while Kubernetes keeps the node Ready), or from everything
//     (PartitionAll). A new Partition replaces the node's cut; Heal(node) removes it.
//
// A cut is an nftables table (inet vigil_partition) in the node's own network
// namespace whose rules drop, in the output and input hooks, the packets to and
// from the host end's forwarder port of the target (the API server's, the
// datapath's) or, for PartitionAll, every IP packet over the node's veth. Packets
// are dropped silently, as by a real cut: nothing is refused or reset, a new
// connection times out, and a connection opened before the cut stalls and resumes
// if it outlives the cut. Stopping a forwarder instead would refuse new
// connections and reset open ones at once, which no real network failure does;
// setting the link down would also lose the neighbour entries and end in "no route
// to host". The link and ARP stay up. nftables (the nft command) must be
// installed; the table goes with the namespace.
//
// Limits of the partition: it cuts IP traffic over the node's link only. Processes
// of a node still share the host's filesystem, unix sockets, /proc and clock, and
// can talk to each other over the namespace's own loopback; a partitioned node's
// process that uses a unix socket or a file shared with the host is not cut off.
// A datapath that must be partitioned too has to be reached over the node's link
// (the stack's engines reach it on VIGIL_HOST_IP).
//
// Faults other than a node's power and network, for the chaos suite:
//
//   - KillProcess(node, name) SIGKILLs one process of a node (its engine, say) or,
//     with node "", one host process of the stack (the datapath); StartProcess
//     starts it again, as a supervisor restarts a crashed container.
//     RestartProcess rolls it as a DaemonSet update does: SIGTERM, a bounded
//     wait, SIGKILL of its process group, then the same spec again. Both are
//     `vigil-sandbox node kill|restart NODE --process NAME`.
//     A stack node's fd keeper (StackFDKeeper) starts before its engine and
//     runs on across its kills and restarts, holding the FUSE connections of
//     its volumes, so an engine kill only stalls their I/O; a power cut ends
//     the keeper too.
//   - RunOnNode(node, spec) runs a one-off process on a node (a pod's writer):
//     a power cut kills it and no boot starts it again.
//   - RestartAPIServer restarts kube-apiserver (SIGTERM, then the same command
//     line, environment and directory; its PID where kwokctl keeps it). The
//     controller-manager and the scheduler run without leader election, so an
//     API server away longer than their renew deadline does not end them.
//     StopAPIServer stops it and leaves it stopped (a control-plane outage:
//     etcd, the nodes and the stack keep running); StartAPIServer starts it
//     again with the same command.
//
// # Racks: the scale sandbox
//
// With Config.Racks the sandbox simulates racks instead of nodes: each rack
// (rack-1, ...) has one network namespace, one link and one kwok that manages
// its Config.RackSize nodes (rack-R-node-I, labelled vigil.io/rack=rack-R) in
// kwok's multi-node mode, so a cluster of 10 racks of 50 nodes runs ten kwoks.
// Stop, Start, Partition, Heal and AddProcess then take rack names: a rack's
// power cut stops its kwok, and all its nodes go NotReady together. Its
// processes see VIGIL_NODES, the rack's node names. StartStack runs, per rack,
// one heartbeat process (`vigil-sandbox heartbeat`, package sandbox/heartbeat)
// that heartbeats every node of the rack to the datapath, instead of an engine
// and a kubelet stand-in per node: nothing is mounted on a rack's nodes. It
// acts as each node with the node's own datapath token (RackTokensFile, a
// line `node NODE TOKEN` per node: with StackAuthTokenReview a TokenRequest
// token bound to the node's Node, one request per node; with StackAuthStatic a
// random token also in the datapath's tokens file) over TLS (Stack.CAFile). The
// controller-manager's and the scheduler's client rate limits are raised
// (500/s) for the tens of thousands of pods such a cluster runs.
//
// # State and cleanup
//
// All state (PIDs with their start times, names of namespaces and veths, boot ids)
// is in WorkDir/state.json, written before each resource is created and guarded by
// a file lock, so that another process (vigil-sandbox node stop, vigil-sandbox down)
// can act on a sandbox it did not create, and DownWorkDir can remove whatever a
// failed Up left. A process is killed only if its PID still has the recorded start
// time. UpForTest registers the teardown with t.Cleanup before creating anything.
// Down leaves no process, namespace, veth or mount: the namespace's bind mount
// under /run/netns goes with the namespace, and the bind mount `ip netns add` puts
// on /run/netns itself is undone once no namespace is left there.
//
// StartStack (stack.go) adds Vigil's volume stack to a running sandbox; the
// end-to-end tests in test/e2e use both. RunOnHost runs another host process
// (the demo's manager) that Down removes with the rest. The stack's datapath
// serves TLS with a certificate from a CA made for the stack, and every caller
// has an identity of its own (stack_auth.go): by default ServiceAccount tokens
// of vigil-system minted with TokenRequest, each engine's bound to its Node and
// checked by the datapath, as vigil-datapath, with TokenReview against the
// sandbox's API server; or, with
// StackAuthStatic, a tokens file with a random token per role and per node.
// An engine's process gets only its node's token (NodeTokenFile).
//
// # Datapath servers on nodes
//
// StackConfig.DatapathServers N >= 1 (`up --stack --datapath-servers N`, N odd
// and at most the node count) runs the datapath as N servers in one control
// group instead of one host process, as on a hyperconverged cluster
// (stack_servers.go): a `vigil-datapath serve` registered on each of the first
// N nodes (AddProcess), in the node's network namespace on its IP, in its
// cgroup on a real node, with its data, Raft directory and boot id under the
// node's directory, its server id the node's name and its peers the others'
// IPs (Raft over mutual TLS with the stack's certificate, which names every
// server's node IP, --raft-ca-file). So a
// power cut of the node (Stop) kills its server, and a partition of the node
// cuts it off: PartitionDatapath then drops the servers' client and Raft ports
// over the node's link both ways (the node's engine still reaches its own
// node's server). Kwok nodes get a route to the other nodes through the host
// (real nodes have their default route). stack.json lists every server
// (Stack.DatapathServers: node, address, Raft address), and every client,
// host process or engine, gets the whole list (Stack.DatapathAddr is the
// comma-separated list). DatapathServers asks each server for its role;
// `vigil-sandbox status` shows them and which one leads.
//
// `vigil-sandbox up --stack` runs 3 servers by default when the sandbox has 3
// or more nodes, and the host server with 1 or 2 nodes (a group of 1 or 2
// survives no server's loss, so one node's power cut would stop every volume)
// or with racks; `--datapath-servers 0` asks for the host server. The Go
// API's zero value, StackConfig.DatapathServers 0, stays the host server: a
// volume's data has one copy, on one server, so a server on a node makes that
// node's power cut take the volumes it holds with it, and the demo and the
// tests that cut a writer's node and need its volume on the next node ask for
// the host server explicitly. DatapathPowerLoss and CutDatapathPower are for
// the host server only.
//
// # Identities
//
// Vigil's components never run with the admin's credential. ApplyDeployRBAC
// applies deploy/'s ServiceAccounts, roles, bindings and the engine's
// admission policy (deploy.Identities, byte for byte what kustomize builds);
// ComponentKubeconfig writes a kubeconfig for one of those ServiceAccounts
// with a TokenRequest token (valid IdentityTokenLifetime), bound to a Node and
// reaching the API server over that node's link when a node is given, as the
// engine's. NodeKubeconfig writes a node's own kubelet identity, a client
// certificate of system:node:NAME (group system:nodes) signed by the cluster's
// CA; the API server runs the NodeRestriction admission plugin, so it may
// change its own Node only, and KubeletRole adds the list and watch of claims,
// volumes and attachments that the kubelet stand-in's informers need. StartStack
// uses them all: the CSI controller and its sidecars run as vigil-csi-controller,
// each engine as vigil-engine-node bound to its Node, each kubelet stand-in as
// its node. kwok, the rest of each node's kubelet (the pods' lifecycle), runs as
// the node too, with a certificate of its own (NodeStatus.KwokKubeconfig): the
// Node authorizer and NodeRestriction refuse it what they refuse a kubelet,
// such as deleting a pod of another node. That matters after a failover: a
// StatefulSet's replacement has the old pod's name, and kwok, finishing the old
// pod's deletion by name, would otherwise delete the replacement. kwok reads a
// little more than a kubelet (every Node at its start, its Lease through an
// informer); the ClusterRole KwokRole grants those reads and nothing else. A
// rack's kwok (a scale sandbox) runs fifty nodes at once, which no one node's
// identity covers: it keeps the admin's kubeconfig.
//
// # The audit log
//
// With Config.AuditLog the API server records, at metadata level, every request
// made by a ServiceAccount of vigil-system (Vigil's components under the
// identities of deploy/) in WorkDir/audit.log, before it answers (blocking mode);
// AuditEvents returns them (who, verb, resource, name, status code, and the
// user's extra attributes such as the node a token is bound to), so a test can
// match each call to the RBAC rules that allowed or refused it.
//
// # Workloads
//
// Workload builds StatefulSets, Deployments, DaemonSets, Jobs and bare pods that
// mount PVCs and are pinned to chosen nodes; CreateStaticVolume makes pre-bound
// driver.vigil.io PersistentVolumes; Poll and the Wait helpers fail with the
// relevant objects and their events.
//
// # Containers
//
// ContainerdConfig describes a private containerd (Debian's containerd and
// runc): its root, state, sockets, CNI configuration directory and log all
// under one directory, so that one runs per node beside any other; its CRI
// plugin sets restrict_oom_score_adj, without which runc fails every pod
// sandbox on these machines, and takes the pause image of sandbox/images as its
// sandbox_image. StartContainerd runs one on the host, Containerd.Import loads
// an image tarball of sandbox/images into its k8s.io namespace, Containerd.Ctr
// runs ctr against it, and Stop ends it (its shims and containers are not
// stopped). The end-to-end test TestImages_RunInContainerd runs the images of
// sandbox/images in one.
package sandbox
