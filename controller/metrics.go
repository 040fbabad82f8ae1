package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-storage/vigil"
)

// Metrics are the reaper's Prometheus metrics.
type Metrics struct {
	// PodsDeleted counts force-deleted pods by owner kind and policy.
	PodsDeleted *prometheus.CounterVec
	// AttachmentsDeleted counts deleted VolumeAttachments.
	AttachmentsDeleted prometheus.Counter
	// Decisions counts decide's answers by decision and reason.
	Decisions *prometheus.CounterVec
	// NodesDown is the number of nodes whose verdict is down.
	NodesDown prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		PodsDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricSubsystemReaper, Name: metricPodsDeleted,
			Help: "Pods on down nodes force-deleted by the reaper, by owner kind and policy.",
		}, []string{labelOwnerKind, labelPolicy}),
		AttachmentsDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricSubsystemReaper, Name: metricAttachmentsDeleted,
			Help: "VolumeAttachments on down nodes deleted by the reaper before force-deleting their pods.",
		}),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricSubsystemReaper, Name: metricDecisions,
			Help: "The reaper's decisions (delete, would-delete, wait, skip) by reason.",
		}, []string{labelDecision, labelReason}),
		NodesDown: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: vigil.MetricsNamespace, Name: metricNodesDown,
			Help: "Nodes whose health verdict is down (Ready Unknown, Ready False past the debounce, deleted, out-of-service).",
		}),
	}
	for _, c := range []prometheus.Collector{m.PodsDeleted, m.AttachmentsDeleted, m.Decisions, m.NodesDown} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
