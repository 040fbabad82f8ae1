// Package heartbeat stands in for the engines of a whole rack of sandbox nodes:
// one process that tells the datapath, every interval, that each of its nodes
// is alive, as each node's vigil-engine-node would. The scale sandbox runs one
// per rack (`vigil-sandbox heartbeat`, inside the rack's network namespace), so
// a rack's power cut or partition silences every node of the rack at the
// datapath at once, without 50 engines per rack.
//
// It acts as each node with that node's own datapath token (a node tokens
// file, `node NODE TOKEN` per line; ParseNodeTokens), one client per node
// over TLS, because the datapath lets a node's credential heartbeat only as
// that node and refuses the controller's: nobody heartbeats for a node but
// the node. The scale sandbox writes the file per rack (sandbox.RackTokensFile).
//
// It heartbeats only: no CSI node service, no FUSE disk, no journal. The
// nodes' heartbeats of a round are sent at once, as independent engines would
// send them, the round bounded by the interval: a heartbeat that waits delays
// no other node's, and a datapath that stops answering costs one interval; a
// failed heartbeat is counted and retried at the next interval.
package heartbeat
