// Package fencingtest holds what every fencing back end is tested with: the
// conformance suite (RunConformance), one behaviour list each back end must
// pass, and Fake, an in-memory back end that passes the same suite and that
// the controller's unit tests use as their Fencer double (with call counters,
// injected errors and a hook). The suite arranges state through a Control (a
// volume granted to a node, a heartbeat, a graceful stop, a moved clock, a cut
// connection) that each back end provides beside the Fencer under test. The
// datapath back end runs it in datapath/fencer against a real in-process
// datapath server; the fake runs it here.
package fencingtest
