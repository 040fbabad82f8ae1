package manager

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/settings"
)

// The CSI controller reads the settings that shape a new volume (today
// default-replica-count) from the same store and managed overlay as
// `vigil-manager run`, read-only and live: a change applies to the next
// CreateVolume. Without --settings-store it has no store, and the overlay
// (if any) and the defaults decide; the sandbox's host stack runs it so.
func csiSettingsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: flagSettingsStore,
			Usage: "the settings store to read (bolt:PATH or configmap:NAMESPACE/NAME; the same as vigil-manager run's), for the settings of new volumes (" +
				settings.NameDefaultReplicaCount + "); empty: no store, the managed overlay and the defaults decide"},
		&cli.StringFlag{Name: flagSettingsDir, TakesFile: true,
			Usage: "managed overlay directory (a mounted ConfigMap), as vigil-manager run's: a file named after a setting overrides the store"},
	}
}

// openCSISettings opens the settings csi serve reads; close releases them.
// A refused value in the store or overlay is logged, and the default (or
// the last good value) holds, as for `vigil-manager run`.
func openCSISettings(c *cli.Context, log *slog.Logger) (s *settings.Settings, closeAll func(), err error) {
	store := settings.NewMemoryStore()
	if spec := c.String(flagSettingsStore); spec != "" {
		ctx, cancel := context.WithTimeout(c.Context, storeOpenTimeout)
		defer cancel()
		if store, err = settings.OpenStore(ctx, spec, c.String("kubeconfig")); err != nil {
			return nil, nil, fmt.Errorf("--%s: %w", flagSettingsStore, err)
		}
	}
	s, err = settings.New(store, c.String(flagSettingsDir), settings.WithRegisterer(prometheus.NewRegistry()), settings.WithLogger(log))
	if err != nil {
		_ = store.Close()
		return nil, nil, err
	}
	return s, func() {
		_ = s.Close()
		_ = store.Close()
	}, nil
}
