// Package devcerts makes a throwaway certificate authority and the datapath's
// server certificate for the sandbox and for tests, so that they run the
// datapath with TLS exactly as a cluster does. Keys are ECDSA P-256, made in
// memory; nothing is fetched. It is not a PKI: a real installation brings its
// own certificates (cert-manager, the cluster's CA) and gives their files to
// `vigil-datapath serve --tls-cert-file --tls-private-key-file` and to
// the clients' CA flags.
package devcerts
