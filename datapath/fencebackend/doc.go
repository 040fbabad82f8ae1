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
// in datapath/client). Each server reports a node's rows only on the
// volumes it holds, so Grants and FenceVolumes ask every server
// (GroupGranter); the volumes of a server that does not answer are listed in
// state unknown, which counts as live, and FenceVolumes reports them not
// fenced (TestClient_Group_NodeGrantsComeFromEveryHolder).
//
// Every error from the datapath that is not a refusal of the caller's input
// (a bad node name) wraps fenceapi.ErrUnavailable: the server could not be
// reached, timed out, refused the token or failed, and nothing is proven. A
// row in a state this code does not know is an error of the same kind, never
// taken as "not live". With a control group of several servers, a fence the
// group committed but the server that holds the volume's data has not
// confirmed it applied (datapath.ErrNotApplied, which names that server) is
// such an error: FenceVolumes leaves the volume out of what it reports
// fenced, and the controller's Event carries the error, so nothing acts on
// that volume until its server confirms
// (TestClient_Group_HolderThatDoesNotApply_NothingReportedDone in
// datapath/client). Grants reads each volume's row from the server that
// holds its data, as that server applied it: a volume whose fence it has not
// applied still reads live there, and the next FenceVolumes fences it again.
// ServerPlacement reports the group's servers, each unreachable when it did
// not answer, and which server holds each volume's data, from the leader
// (GroupStatuser; TestClient_GroupStatus_ServerDown in datapath/client): the
// controllers put an Event on each PersistentVolume whose server does not
// answer. For a volume of several replicas it also reports the replicas and
// the volume's state, datapath.JudgeQuorum's (TestPlacement), so the
// controllers tell a volume that lost its quorum from one still served.
// Servers is the same without the volumes, for the manager's nodes
// view, which polls every second.
// Backend passes fenceapi/fenceapitest's conformance suite over a real
// datapath server (backend_test.go).
package fencebackend
