// Package demo is `make run`: Vigil's live demonstration on a sandbox, the
// `demo` subcommand of bin/vigil-sandbox.
//
// Run first builds the images real nodes import (package sandbox/images,
// go-containerregistry, no container engine and nothing fetched): the pause
// image that holds each pod's sandbox and the writer image, their programs
// compiled from Config.SourceDir, and the tools image (busybox) for a shell
// in a real container; it prints each image's time. It then brings up a
// 3-node sandbox of real nodes (package sandbox, sandbox.KubeletReal): each
// node a real kubelet, containerd and runc, a CNI bridge and kube-proxy in a
// network namespace and cgroup of its own, importing those images at its
// first boot. On it run Vigil's volume stack under the identities of deploy/
// (the datapath, one server on the host, which no node's power cut reaches:
// a volume's data has one copy; the CSI controller with its sidecars; on
// every node an engine, registered as its kubelet's CSI node plugin) and the
// CRDs, then `vigil-manager run` as a host process under the manager's
// identity, wired to the datapath, with the policy
// delete-both-statefulset-and-deployment-pod and the fast fenced trigger on,
// its settings in a bbolt file (the embedded default store) and its UI, REST
// API and metrics on Config.Listen (127.0.0.1:9500). Then the demo workload:
// a StatefulSet whose pod has a volume of the StorageClass vigil and whose
// container is the writer (package sandbox/ledger in the writer image),
// appending checksummed records to the volume and acknowledging each, once
// fsync returned, in a ledger on the host (a hostPath directory of the
// sandbox's).
//
// While it runs, it follows what happens and prints it as it happens: the
// pods of the StatefulSet (scheduled, Running, Terminating, gone), the
// volume attached to the pod's node and reported in use by its kubelet
// (status.volumesInUse, which a real kubelet waits for before it stages a
// volume: its node-status sync is most of a recovery on real nodes), each
// NodeRecovery's timeline (detected, fenced, tainted, pods reaped,
// attachments freed, replacements Running, the node's return), and, when a
// replacement's volume is published on its new node, the data check, read
// there from the host: every record the previous writer acknowledged must be
// on the volume, and none it wrote after its node was fenced.
//
// Interactive (the default), it prints what to try, with a ready KUBECONFIG
// line, and runs until its context ends (Ctrl-C). With Config.Auto, it cuts
// the power of the node that runs the demo pod once everything is up (its
// kubelet, containerd, shims, the writer's container, kube-proxy and engine:
// the node's whole cgroup), and returns nil once the replacement's container
// runs elsewhere and the data check passed, an error after Config.Timeout
// otherwise. Either way it removes the whole sandbox before returning, and
// checks that nothing is left (sandbox.Leftovers): no work directory (the
// nodes' containerd state is in it), mount under it, network namespace or
// cgroup of the sandbox, no process started in it.
//
// Config.Kubelet sandbox.KubeletKwok runs the same demo on kwok nodes, for
// a machine without containerd: a kwok process per node as its kubelet, a
// kubelet stand-in for the volume calls, and the writer a process of the
// node instead of a container.
//
// The package owns only the demonstration; the cluster, the stack, the
// images and the processes are sandbox's, the writer and its checks
// ledger's. The end-to-end suite runs both modes on real nodes
// (test/e2e: TestDemo_Auto, part of `make test`, and TestDemo_Interactive).
package demo
