package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	vigil "github.com/vigil-storage/vigil"
	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/controller"
	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/fencebackend"
)

// The datapath is the manager's fencing back end; a client of its group
// reports the group's servers and where each volume's data is, which the
// back end passes on to the nodes view and the controllers.
var (
	_ controller.FenceBackend    = (*fencebackend.Backend)(nil)
	_ fencebackend.GroupStatuser = (*client.Client)(nil)
	_ serversView                = (*fencebackend.Backend)(nil)
)

// Flags of `vigil-manager run` that wire the closed loop: the fencing back end
// and the NodeRecovery records.
const (
	flagDatapath          = "datapath"
	flagDatapathTokenFile = "datapath-token-file"
	flagDatapathTimeout   = "datapath-timeout"
	flagRecoveries        = "recoveries"
)

func loopFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: flagDatapath, EnvVars: []string{"VIGIL_DATAPATH_ADDR"},
			Usage: datapath.ServerListUsage + ". The datapath is the fencing back end: with it the manager fences down nodes " +
				"(fast-fenced-trigger), judges storage isolation from engine heartbeats and frees proven-fenced volumes; " +
				"without it nothing is fenced by Vigil and only Kubernetes' own proofs count"},
		&cli.StringFlag{Name: flagDatapathTokenFile, EnvVars: []string{"VIGIL_DATAPATH_TOKEN_FILE"}, TakesFile: true,
			Usage: "file holding the manager's datapath token, the controller role: a projected ServiceAccount token for the audience " +
				vigil.DatapathTokenAudience + " (read again when it changes) or the controller token of the datapath's tokens file (required with --" + flagDatapath + ")"},
		&cli.DurationFlag{Name: flagDatapathTimeout, Value: 5 * time.Second,
			Usage: "how long one datapath call may take (a fence of every volume of a node is one call)"},
		&cli.BoolFlag{Name: flagRecoveries, Value: true,
			Usage: "write a NodeRecovery (vigil.io/v1alpha1) per node failure and show them in the UI; needs the CRD (" + recoveryCRDFile + "): without it the manager does not start, unless this is false"},
	}, datapathTLSFlags("datapath-")...)
}

// loopOptions are the validated closed-loop flags.
type loopOptions struct {
	datapath, tokenFile string
	dial                datapathDial
	timeout             time.Duration
	recoveries          bool
}

func parseLoopOptions(c *cli.Context) (loopOptions, error) {
	o := loopOptions{datapath: c.String(flagDatapath), tokenFile: c.String(flagDatapathTokenFile),
		timeout: c.Duration(flagDatapathTimeout), recoveries: c.Bool(flagRecoveries)}
	switch {
	case o.datapath != "" && o.tokenFile == "":
		return o, fmt.Errorf("--%s %s needs --%s (the file holding the datapath token)", flagDatapath, o.datapath, flagDatapathTokenFile)
	case o.datapath == "" && o.tokenFile != "":
		return o, fmt.Errorf("--%s given without --%s: name the datapath's servers (host:port,host:port,...)", flagDatapathTokenFile, flagDatapath)
	case o.timeout <= 0:
		return o, fmt.Errorf("--%s %s: must be positive", flagDatapathTimeout, o.timeout)
	}
	if o.datapath != "" {
		var err error
		if o.dial, err = parseDatapathDial(c, "datapath-", o.datapath); err != nil {
			return o, err
		}
	}
	return o, nil
}

// recoveryCRDFile is the NodeRecovery CRD in the repository and in a release.
const recoveryCRDFile = "deploy/crds/vigil.io_noderecoveries.yaml"

// errNoRecoveryCRD: the API server does not serve NodeRecovery objects.
var errNoRecoveryCRD = errors.New("the API server does not serve noderecoveries." + v1alpha1.SchemeGroupVersion.String())

// noFencerWarning is logged at start and shown by /readyz when the manager runs
// without a fencing back end.
const noFencerWarning = "no --datapath: nothing is fenced by Vigil, storage isolation is not judged, " +
	"and the fast trigger fires only on Kubernetes' own proofs (a deleted node, the out-of-service taint)"

// loopWiring is what the closed loop adds to the controller Config.
type loopWiring struct {
	fencer     controller.FenceBackend
	recoveries controller.RecoveryClient
	close      func()
}

// wireLoop connects the fencing back end and the NodeRecovery client.
func wireLoop(ctx context.Context, o loopOptions, cfg *rest.Config) (loopWiring, error) {
	w := loopWiring{close: func() {}}
	if o.datapath != "" {
		dp, err := o.dial.dial(ctx, client.WithTimeout(o.timeout))
		if err != nil {
			return w, fmt.Errorf("--%s: %w", flagDatapath, err)
		}
		w.fencer, w.close = fencebackend.New(dp), func() { _ = dp.Close() }
		slog.Info("vigil-manager: fencing back end", "datapath", o.datapath)
	} else {
		slog.Warn("vigil-manager: " + noFencerWarning)
	}
	if o.recoveries {
		rc, err := recoveryClient(ctx, cfg, recoveryCheckTimeout)
		if err != nil {
			return w, err
		}
		w.recoveries = rc
	}
	return w, nil
}

// recoveryClient returns a NodeRecovery client, or one clear error when the API
// server does not serve the CRD: a manager that ran on would log a watch error
// every few seconds and write no record.
//
// Only the API server's own answer that the group or the resource is absent
// means the CRD is not installed. Any other failure (the API server
// restarting, its authorizer not ready yet: 403) is asked again for up to
// timeout, then reported as what it is.
func recoveryClient(ctx context.Context, cfg *rest.Config, timeout time.Duration) (*v1alpha1.Client, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		res, err := dc.ServerResourcesForGroupVersion(v1alpha1.SchemeGroupVersion.String())
		switch {
		case err == nil && servesRecoveries(res):
			return v1alpha1.NewForConfig(cfg)
		case err == nil || apierrors.IsNotFound(err):
			return nil, fmt.Errorf("%w: install it with `kubectl apply -f %s`, or run with --%s=false to keep no recovery records",
				errNoRecoveryCRD, recoveryCRDFile, flagRecoveries)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cannot tell whether the API server serves noderecoveries.%s (asked for %s): %w",
				v1alpha1.SchemeGroupVersion, timeout, err)
		case <-time.After(wait):
		}
	}
}

// recoveryCheckTimeout bounds how long the start waits to learn whether the
// NodeRecovery CRD is served.
const recoveryCheckTimeout = 60 * time.Second

func servesRecoveries(res *metav1.APIResourceList) bool {
	for _, r := range res.APIResources {
		if r.Name == v1alpha1.Resource {
			return true
		}
	}
	return false
}

// checkNoOtherLeader refuses --leader-elect=false while another manager holds
// the Lease: two managers acting at once would race to do the same deletes.
func checkNoOtherLeader(ctx context.Context, c kubernetes.Interface, namespace, name string, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lease, err := c.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
		return nil
	case err != nil:
		return fmt.Errorf("--%s=false: check the Lease %s/%s: %w", flagLeaderElect, namespace, name, err)
	}
	s := lease.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return nil
	}
	expires := s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second)
	if now.Before(expires) {
		return fmt.Errorf("--%s=false is for a single manager only, but %s holds the Lease %s/%s (renewed %s ago, valid until %s): stop it first, or run with leader election",
			flagLeaderElect, *s.HolderIdentity, namespace, name, now.Sub(s.RenewTime.Time).Round(time.Second), expires.Format(time.RFC3339))
	}
	return nil
}
