// Package fencer is the datapath's fencing back end: Fencer wraps a datapath
// client (datapath/client.Client) and offers the calls the manager's
// controllers make to fence a dead node out of chosen volumes (FenceVolumes;
// FenceNode fences it out of all of them), to prove which volumes a node can no
// longer write, and to see which nodes' engines still talk to the storage
// (the controller declares that interface, controller.Fencer; this package
// does not import it, and the manager asserts the match where it wires the
// two). Results are fencing's value types. A volume's CSI handle (the PV's
// spec.csi.volumeHandle) is its datapath volume id, as datapath/csi's
// CreateVolume hands it out, so no mapping is stored.
//
// Every error from the datapath that is not a refusal of the caller's input
// (a bad node name) wraps fencing.ErrUnavailable: the server could not be
// reached, timed out, refused the token or failed, and nothing is proven.
// A row in a state this code does not know is an error of the same kind,
// never taken as "not live". Fencer passes fencing/fencingtest's conformance
// suite over a real datapath server (fencer_test.go).
package fencer
