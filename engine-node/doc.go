// Package enginenode is the per-node agent, vigil-engine-node: the CSI node service
// for the kubelet, heartbeats to the datapath, a bbolt journal of what is staged and
// published on this node, and the cleanup that runs while the node carries Vigil's
// fenced taint, before the taint is removed. (Work to come; see the engine-node issue.)
package enginenode
