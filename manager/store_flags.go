package manager

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/settings"
)

// The flags that choose where settings live, shared by every command that reads
// or writes settings. Each command that declares them (the settings command and
// its subcommands) gets fresh instances, so they may be given before or after the
// subcommand name; storeFlag resolves them.
const (
	flagStore       = "store"
	flagKubeconfig  = "kubeconfig"
	flagSettingsDir = "settings-dir"
)

// storeOpenTimeout bounds opening the store (an unreachable API server, a bolt
// file locked by another process).
const storeOpenTimeout = 30 * time.Second

func storeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:  flagStore,
			Usage: "where settings are kept: bolt:PATH (a file) or configmap:NAMESPACE/NAME (default: $" + settings.StoreEnv + ", else " + settings.DefaultStoreSpec() + ")",
		},
		&cli.StringFlag{
			Name:      flagKubeconfig,
			Usage:     "kubeconfig for a configmap store (default: $KUBECONFIG, ~/.kube/config, or the in-cluster service account)",
			TakesFile: true,
		},
		&cli.StringFlag{
			Name:      flagSettingsDir,
			Usage:     "managed overlay directory (a mounted ConfigMap): a file named after a setting overrides the store and locks it",
			TakesFile: true,
		},
	}
}

// storeFlag returns the value of one of the store flags from the nearest command
// that set it (the subcommand first, then its parents), "" when none did.
func storeFlag(c *cli.Context, name string) string {
	for _, ctx := range c.Lineage() {
		if ctx.Command != nil && ctx.IsSet(name) {
			return ctx.String(name)
		}
	}
	return ""
}

// storeSpec is the store named by --store, else by VIGIL_SETTINGS_STORE, else
// the default. (The variable is read here rather than through the flag's EnvVars
// so that a --store given to a parent command beats it.)
func storeSpec(c *cli.Context) string {
	if spec := storeFlag(c, flagStore); spec != "" {
		return spec
	}
	if spec := os.Getenv(settings.StoreEnv); spec != "" {
		return spec
	}
	return settings.DefaultStoreSpec()
}

// openSettings opens the store and the overlay the flags name and returns the
// live settings and a function that closes both. Refused values found in the
// store or overlay are not logged (the commands show them as problems) unless
// log is given through opts.
func openSettings(c *cli.Context, opts ...settings.Option) (*settings.Settings, func(), error) {
	spec := storeSpec(c)
	ctx, cancel := context.WithTimeout(c.Context, storeOpenTimeout)
	defer cancel()
	store, err := settings.OpenStore(ctx, spec, storeFlag(c, flagKubeconfig))
	if err != nil {
		return nil, nil, err // it names the store
	}
	opts = append([]settings.Option{
		settings.WithRegisterer(prometheus.NewRegistry()),
		settings.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	}, opts...)
	s, err := settings.New(store, storeFlag(c, flagSettingsDir), opts...)
	if err != nil {
		_ = store.Close()
		return nil, nil, err
	}
	return s, func() {
		_ = s.Close()
		_ = store.Close()
	}, nil
}
