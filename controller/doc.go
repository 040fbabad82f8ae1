// Package controller holds Vigil's reconcilers: node health, the pod reaper,
// VolumeAttachment recovery and crash-loop handling. Each one snapshots state from
// shared informers, calls a pure decide function with the clock passed in and
// executes the resulting actions, emitting an Event and a metric for each. The
// package declares the small interfaces it needs (a fencer, a settings reader) and
// leaves their implementation to datapath and settings.
package controller
