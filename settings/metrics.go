package settings

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-storage/vigil"
)

type metrics struct {
	overlayRejected *prometheus.CounterVec
	storeRejected   *prometheus.CounterVec
}

// newMetrics registers the counters on r; when another Settings already
// registered them there, it shares theirs.
func newMetrics(r prometheus.Registerer) (*metrics, error) {
	overlay, err := registerCounter(r, prometheus.CounterOpts{
		Namespace: vigil.MetricsNamespace, Subsystem: "settings", Name: "overlay_rejected_total",
		Help: "Values refused in the managed overlay directory, by setting (\"unknown\" for a file that names no setting).",
	})
	if err != nil {
		return nil, err
	}
	store, err := registerCounter(r, prometheus.CounterOpts{
		Namespace: vigil.MetricsNamespace, Subsystem: "settings", Name: "store_rejected_total",
		Help: "Values refused when read from the settings store, by setting.",
	})
	if err != nil {
		return nil, err
	}
	return &metrics{overlayRejected: overlay, storeRejected: store}, nil
}

func registerCounter(r prometheus.Registerer, opts prometheus.CounterOpts) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(opts, []string{"setting"})
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing, nil
			}
		}
		return nil, fmt.Errorf("register metric %s: %w", prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name), err)
	}
	return c, nil
}
