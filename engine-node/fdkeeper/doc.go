// Package fdkeeper holds FUSE connections across engine restarts.
//
// A FUSE connection lives as long as any process holds a descriptor of its
// /dev/fuse file. The keeper (`vigil-engine-node fd-keeper`) is a small,
// long-lived process that holds one such descriptor per staged volume,
// received from the engine and handed back to the next engine over a unix
// socket (SCM_RIGHTS). While it runs, an engine that stops or is killed does
// not take the volumes' connections with it: the kernel queues the requests
// of the loop devices until the next engine adopts the descriptors
// (fusedisk.Adopt), and nothing above the FUSE file notices.
//
// The protocol is one JSON message per request and per answer on a
// SOCK_SEQPACKET socket: put (a volume, exactly one /dev/fuse descriptor and
// a small JSON object of metadata the keeper never interprets), get (a
// duplicate of the descriptor and the metadata), drop and list. A bad
// request is answered with an error that says what was wrong and changes
// nothing (TestKeeper_BadRequests_ChangeNothing). The keeper writes nothing
// to disk and knows nothing of volumes, epochs or FUSE beyond checking that a
// descriptor is /dev/fuse, so it seldom needs an upgrade: stopping it drops
// every connection it holds, which fails the I/O of every volume whose
// engine is not serving it at that moment.
package fdkeeper
