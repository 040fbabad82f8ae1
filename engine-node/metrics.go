package enginenode

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	vigil "github.com/vigil-storage/vigil"
)

// metricsSubsystem makes every engine metric vigil_engine_*.
const metricsSubsystem = "engine"

// Cleanup outcomes, the values of vigil_engine_cleanup_total{outcome}.
const (
	CleanupCleaned  = "cleaned"  // leftovers removed
	CleanupReserved = "reserved" // a stage from before a restart served again
	CleanupFailed   = "failed"   // something could not be removed; retried
)

// Metrics are the engine's Prometheus metrics.
type Metrics struct {
	volumesStaged     prometheus.Gauge
	cleanups          *prometheus.CounterVec
	writesFenced      prometheus.Counter
	ioRetries         prometheus.Counter
	replays           prometheus.Counter
	replayedBytes     prometheus.Counter
	budgetFlushes     prometheus.Counter
	unflushedBytes    prometheus.Gauge
	heartbeatFailures prometheus.Counter
	registrations     *prometheus.CounterVec
	stageSeconds      prometheus.Histogram
	publishSeconds    prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	buckets := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &Metrics{
		volumesStaged: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "volumes_staged",
			Help: "Volumes currently staged (served through FUSE, loop device and mount) on this node.",
		}),
		cleanups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "cleanup_total",
			Help: "Cleanups of stages and publishes left by a crash, a reboot or a reap, by outcome.",
		}, []string{"outcome"}),
		writesFenced: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "writes_fenced_total",
			Help: "Writes and flushes the datapath refused because this node is fenced or its epoch is stale.",
		}),
		ioRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "io_retries_total",
			Help: "Block reads, writes and flushes sent to the datapath again because it did not answer (restarting, unreachable); each is retried until --io-timeout.",
		}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "replays_total",
			Help: "Times a volume's acknowledged, unflushed writes were sent again because the datapath's machine rebooted (a power cut) and may have lost them.",
		}),
		replayedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "replayed_bytes_total",
			Help: "Bytes of acknowledged, unflushed writes sent again after a reboot of the datapath's machine.",
		}),
		budgetFlushes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "unflushed_budget_flushes_total",
			Help: "Flushes the engine made on its own because a volume's acknowledged, unflushed writes exceeded --unflushed-write-budget, or every volume's together exceeded --unflushed-write-node-budget.",
		}),
		unflushedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "unflushed_bytes",
			Help: "Memory the engine holds for acknowledged, unflushed writes of every volume (bounded by --unflushed-write-node-budget).",
		}),
		heartbeatFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "heartbeat_failures_total",
			Help: "Heartbeats to the datapath that failed.",
		}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "kubelet_registrations_total",
			Help: "What the kubelet answered to the engine's plugin registration (--kubelet-registration-dir), by outcome: registered or failed.",
		}, []string{"outcome"}),
		stageSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "stage_duration_seconds",
			Help: "Time NodeStageVolume took, successful or not.", Buckets: buckets,
		}),
		publishSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "publish_duration_seconds",
			Help: "Time NodePublishVolume took, successful or not.", Buckets: buckets,
		}),
	}
	for _, o := range []string{CleanupCleaned, CleanupReserved, CleanupFailed} {
		m.cleanups.WithLabelValues(o)
	}
	for _, o := range []string{RegistrationRegistered, RegistrationFailed} {
		m.registrations.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(m.volumesStaged, m.cleanups, m.writesFenced, m.ioRetries, m.replays, m.replayedBytes, m.budgetFlushes, m.unflushedBytes, m.heartbeatFailures, m.registrations, m.stageSeconds, m.publishSeconds)
	}
	return m
}

func since(h prometheus.Histogram, start time.Time) { h.Observe(time.Since(start).Seconds()) }
