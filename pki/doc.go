// Package pki issues and checks the certificates of a Vigil install: one CA
// of its own (ECDSA P-256), and serving certificates for the Services that
// listen beyond loopback (the datapath, the manager's API), each naming its
// Service's DNS names. Ensure keeps them, with the CA certificate clients
// mount and the manager API's one bearer token, as Secrets of one namespace:
// what is missing is created, what is there and valid is never touched, and
// anything there that is not valid (unparsable, expired, for other names,
// signed by another CA) is reported with what to do and nothing is changed.
// Renewal is left to a person (delete the Secret, run Ensure again).
//
// issue.go holds the pure part (issue, parse, check, with the clock passed
// in; pki_test.go is its specification); ensure.go reads and creates the
// Secrets through client-go's typed SecretInterface, and its behaviour
// against a real API server is proven by test/e2e/certs_test.go.
package pki
