// Package tokenreview is the datapath's Kubernetes-native authenticator: a
// caller presents a ServiceAccount token issued for the audience
// vigil-datapath (a projected token in its pod), and the datapath asks the API
// server who it is with a TokenReview (authentication.k8s.io/v1). The
// ServiceAccount maps to a role by configuration: the manager's and the CSI
// controller's to the controller role, the engines' to the engine role, each
// engine as the node the API server names in the token's user extra
// authentication.kubernetes.io/node-name (present for a token bound to a pod
// on a node, or to the Node object itself through a TokenRequest). The node
// never comes from the request.
//
// Results are cached by the token's SHA-256 digest for a short time (Config.TTL,
// refusals for at most 5 s), never past the token's own expiry (its exp claim,
// read only to bound the cache), and the cache is bounded (Config.MaxEntries).
// A TokenReview that fails is never taken as a yes: the call is refused with
// datapath.ErrAuthUnavailable, unless the same token was accepted by the API
// server within Config.OutageGrace and has not expired, so that a restart of
// the API server does not stop every node's I/O (fencing does not depend on
// identities: a fenced node's writes carry a stale epoch whatever its token).
// Concurrent checks of one token share one TokenReview. A token in use is
// reviewed again in the background two thirds into its TTL, so that no call
// waits on the API server for a token it accepted: a heartbeat that waited on
// a slow TokenReview past the connectivity-loss threshold made a healthy node
// look storage-isolated (the 500-node bench saw every rack of heartbeats stall
// in the same 30 s rhythm). The answer is still never used past its TTL, and a
// refusal from the background review takes effect as soon as it arrives.
//
// It leaves the tokens file (datapath.StaticTokens) and the authorization of
// each call (datapath.Authorize) to package datapath; the datapath needs RBAC
// `create tokenreviews` (authentication.k8s.io) for it.
package tokenreview
