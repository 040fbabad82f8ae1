// Package fencebackend is the datapath as a fence back end: Backend wraps a
// datapath client (datapath/client.Client) and offers the calls the
// controller makes of one (controller.FenceBackend, which this package does
// not import; the manager asserts the match where it wires the two): fence a
// node out of chosen volumes (FenceVolumes; FenceNode fences it out of all of
// them), list a node's grants (the controller's only proof that a node can no
// longer write a volume), report which nodes' engines still talk to the
// storage, and list the volumes the datapath refuses all I/O on. Results are
// fenceapi's value types. A volume's CSI handle (the PV's
// spec.csi.volumeHandle) is its datapath volume id, as datapath/csi's
// CreateVolume hands it out, so no mapping is stored.
//
// Connectivity is soft state each datapath server keeps for itself. Given a
// client of several servers (ServerNodes), Connectivity asks each and merges
// the reports of those that answer (mergeReports; TestMergeReports is its
// specification): a node heard recently by any server is not silent, and a
// server that does not answer adds nothing, so one dead server isolates no
// node (TestClient_Group_HeartbeatsReachEveryServerAndOneDownIsolatesNobody
// in datapath/client).
//
// Every error from the datapath that is not a refusal of the caller's input
// (a bad node name) wraps fenceapi.ErrUnavailable: the server could not be
// reached, timed out, refused the token or failed, and nothing is proven. A
// row in a state this code does not know is an error of the same kind, never
// taken as "not live". Backend passes fenceapi/fenceapitest's conformance
// suite over a real datapath server (backend_test.go).
package fencebackend
