package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-storage/vigil"
)

// Metrics are the controllers' Prometheus metrics.
type Metrics struct {
	// PodsDeleted counts force-deleted pods by owner kind and policy.
	PodsDeleted *prometheus.CounterVec
	// AttachmentsDeleted counts deleted VolumeAttachments.
	AttachmentsDeleted prometheus.Counter
	// Decisions counts decide's answers by decision and reason.
	Decisions *prometheus.CounterVec
	// NodesDown is the number of nodes whose verdict is down.
	NodesDown prometheus.Gauge
	// NodesIsolated is the number of nodes whose engine is silent at the datapath.
	NodesIsolated prometheus.Gauge
	// FenceDuration is how long fencing every volume of a node took.
	FenceDuration prometheus.Histogram
	// Fences counts node fences by outcome (done, failed).
	Fences *prometheus.CounterVec
	// RecoveryDuration is detection → every covered replacement Running.
	RecoveryDuration prometheus.Histogram
	// AttachmentActions counts attachment recovery's actions by action.
	AttachmentActions *prometheus.CounterVec
	// CrashLoopDeleted counts crash-looping pods deleted, by owner kind.
	CrashLoopDeleted *prometheus.CounterVec
	// DatapathReachable is 1 while the fencing back end answers, 0 when not.
	DatapathReachable prometheus.Gauge
	// ControlPlaneOutage is 1 while some zone or the whole cluster is taken to
	// be cut off from a failed control plane, 0 otherwise.
	ControlPlaneOutage prometheus.Gauge
	// NodesHeldOutage is the number of nodes held in a control-plane outage.
	NodesHeldOutage prometheus.Gauge
	// EventsQueued is the number of Events waiting to be written.
	EventsQueued prometheus.Gauge
	// EventsDropped counts Events never written: the queue was full, the API
	// server refused them, or the manager stopped first.
	EventsDropped prometheus.Counter
	// VolumesFailed is the number of volumes the storage refuses all I/O on
	// until an operator clears them (a flush of their data failed).
	VolumesFailed prometheus.Gauge
	// Volumes is the number of volumes of a datapath of several servers by
	// state (ok, degraded, no-quorum, server-down, invalid), as of the last
	// poll that knew where they are.
	Volumes *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	ns := vigil.MetricsNamespace
	m := &Metrics{
		PodsDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: metricSubsystemReaper, Name: metricPodsDeleted,
			Help: "Pods on down nodes force-deleted by the reaper, by owner kind and policy.",
		}, []string{labelOwnerKind, labelPolicy}),
		AttachmentsDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: metricSubsystemReaper, Name: metricAttachmentsDeleted,
			Help: "VolumeAttachments on down nodes deleted by Vigil (before reaping their pods, or by attachment recovery).",
		}),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: metricSubsystemReaper, Name: metricDecisions,
			Help: "The reaper's decisions (delete, would-delete, wait, skip) by reason.",
		}, []string{labelDecision, labelReason}),
		NodesDown: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: metricNodesDown,
			Help: "Nodes whose health verdict is down (Ready Unknown, Ready False past the debounce, deleted, out-of-service, storage-isolated and fenced).",
		}),
		NodesIsolated: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: metricNodesIsolated,
			Help: "Nodes whose engine has been silent at the datapath for the connectivity-loss threshold.",
		}),
		FenceDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: metricFenceDuration,
			Help:    "Time to fence every volume granted to a down node at the datapath (durable on return).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		Fences: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: metricFences,
			Help: "Node fences attempted by the manager, by outcome.",
		}, []string{labelOutcome}),
		RecoveryDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: metricRecoveryDuration,
			Help:    "Node failure detected → every covered pod's replacement Running.",
			Buckets: []float64{1, 2, 3, 4, 5, 7.5, 10, 15, 20, 30, 60, 120, 300, 600},
		}),
		AttachmentActions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: metricAttachmentActions,
			Help: "Attachment recovery on down nodes: VolumeAttachments deleted, volumes cleared from volumesInUse.",
		}, []string{labelAction}),
		CrashLoopDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: metricCrashLoopDeleted,
			Help: "Crash-looping protected pods deleted (not forced) so they come back with a fresh attachment, by owner kind.",
		}, []string{labelOwnerKind}),
		DatapathReachable: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: metricDatapathReachable,
			Help: "1 while the fencing back end (the datapath) answers the manager, 0 when it does not.",
		}),
		ControlPlaneOutage: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: metricOutage,
			Help: "1 while a zone or the whole cluster is down by Kubernetes' verdict while its engines still heartbeat to the datapath (a control-plane outage), 0 otherwise.",
		}),
		NodesHeldOutage: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: metricNodesHeldOutage,
			Help: "Nodes held in a control-plane outage: neither fenced nor reaped on Kubernetes' verdict.",
		}),
		EventsQueued: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: metricEventsQueued,
			Help: "Kubernetes Events waiting to be written (their client has a rate limit of its own).",
		}),
		EventsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: metricEventsDropped,
			Help: "Kubernetes Events never written: the queue was full, the API server refused them, or the manager stopped first.",
		}),
		VolumesFailed: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: metricVolumesFailed,
			Help: "Volumes whose data failed to flush to disk on the storage: all their I/O is refused until an operator clears them.",
		}),
		Volumes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: metricVolumes,
			Help: "Volumes of a storage of several servers by state: ok, degraded (served, but a replica is out of sync or its server does not answer), no-quorum (I/O suspended), server-down (the server holding the volume, which serves its reads, does not answer), invalid.",
		}, []string{labelState}),
	}
	for _, c := range []prometheus.Collector{m.PodsDeleted, m.AttachmentsDeleted, m.Decisions, m.NodesDown,
		m.NodesIsolated, m.FenceDuration, m.Fences, m.RecoveryDuration, m.AttachmentActions, m.CrashLoopDeleted,
		m.DatapathReachable, m.ControlPlaneOutage, m.NodesHeldOutage, m.EventsQueued, m.EventsDropped, m.VolumesFailed, m.Volumes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
