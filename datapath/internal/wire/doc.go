// Package wire is the datapath's wire format: the request and response messages,
// their hand-written binary encoding, and the gRPC codec ("vigil-dp") that carries
// them. No protobuf code generation is involved: the service is described by a
// hand-written grpc.ServiceDesc in package datapath, and both sides force this
// codec. Decoding is strict (every length checked against a limit, no trailing
// bytes) because it is the first thing an untrusted request meets.
package wire
