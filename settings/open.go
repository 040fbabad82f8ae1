package settings

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// StoreEnv is the environment variable that chooses the store when no --store
// flag is given.
const StoreEnv = "VIGIL_SETTINGS_STORE"

// apiTimeout bounds each request of the ConfigMap store, so an unreachable API
// server is reported instead of hanging.
const apiTimeout = 10 * time.Second

// DefaultStoreSpec is the store used when neither --store nor VIGIL_SETTINGS_STORE
// says otherwise: "bolt:" + DefaultBoltPath().
func DefaultStoreSpec() string { return "bolt:" + DefaultBoltPath() }

// DefaultBoltPath is the per-user settings file: $XDG_CONFIG_HOME/vigil/settings.db,
// which is ~/.config/vigil/settings.db when XDG_CONFIG_HOME is unset (on Linux;
// os.UserConfigDir's equivalent elsewhere). If no home directory is known it is
// settings.db in the working directory.
func DefaultBoltPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "settings.db"
	}
	return filepath.Join(dir, "vigil", "settings.db")
}

// OpenStore opens the store a spec names: "bolt:PATH" (a file, created if
// needed) or "configmap:NAMESPACE/NAME" (through kubeconfig, or the default
// loading rules and in-cluster configuration when kubeconfig is ""). Anything
// else is an ErrInvalidStoreSpec naming the two forms.
func OpenStore(ctx context.Context, spec, kubeconfig string) (Store, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "bolt":
		if arg == "" {
			return nil, fmt.Errorf("%w %q: bolt needs a file path, e.g. bolt:%s", ErrInvalidStoreSpec, spec, DefaultBoltPath())
		}
		return OpenBolt(arg)
	case "configmap":
		ns, name, ok := strings.Cut(arg, "/")
		if !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("%w %q: want configmap:NAMESPACE/NAME, e.g. configmap:vigil-system/vigil-settings", ErrInvalidStoreSpec, spec)
		}
		client, err := kubeClient(kubeconfig)
		if err != nil {
			return nil, err
		}
		return NewConfigMapStore(ctx, client, ns, name)
	}
	return nil, fmt.Errorf("%w %q: want bolt:PATH or configmap:NAMESPACE/NAME", ErrInvalidStoreSpec, spec)
}

func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		where := "the default kubeconfig or in-cluster configuration"
		if kubeconfig != "" {
			where = "kubeconfig " + kubeconfig
		}
		return nil, fmt.Errorf("configmap store: %s: %w", where, err)
	}
	cfg.Timeout = apiTimeout
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("configmap store: %w", err)
	}
	return client, nil
}
