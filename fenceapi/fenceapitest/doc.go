// Package fenceapitest is what every fence back end is tested with.
// RunConformance is the behaviour each one must have, run against a
// FenceBackend and a Control that arranges its state through a path of its
// own (a volume granted to a node, a heartbeat, a graceful stop, a moved
// clock, a cut connection). Fake is an in-memory back end that passes the
// same suite, for tests of code that calls a back end: it counts calls,
// returns injected errors and runs a hook before each call. Back ends run the
// suite in their own tests (datapath/fencebackend against a real in-process
// datapath server).
package fenceapitest
