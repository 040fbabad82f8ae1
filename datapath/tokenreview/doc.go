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
// Concurrent checks of one token share one TokenReview.
//
// It leaves the tokens file (datapath.StaticTokens) and the authorization of
// each call (datapath.Authorize) to package datapath; the datapath needs RBAC
// `create tokenreviews` (authentication.k8s.io) for it.
package tokenreview
