package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/pki"
)

// Flags of `vigil-manager certs ensure`.
const (
	flagCertsNamespace     = "namespace"
	flagCertsClusterDomain = "cluster-domain"
	flagCertsCAValidity    = "ca-validity"
	flagCertsValidity      = "cert-validity"
	flagCertsTimeout       = "timeout"
)

// certsEnsureAttempts: a create that meets a Secret another run made
// meanwhile starts over, this many times in all.
const certsEnsureAttempts = 3

// certsCommand is `vigil-manager certs ensure`: the install's certificates
// and API token, as Secrets (deploy/ runs it as the Job vigil-certs).
func certsCommand() *cli.Command {
	plan := pki.DefaultPlan(vigil.Namespace)
	return &cli.Command{
		Name:  "certs",
		Usage: "the install's CA, the serving certificates of the datapath and the manager's API, and the API token",
		Subcommands: []*cli.Command{{
			Name:  "ensure",
			Usage: "create the Secrets that are missing; never change one that exists (a broken one is an error that says what to do)",
			Description: "In --" + flagCertsNamespace + ", as Secrets: " + vigil.CASecret + " (the CA and its key, mounted by nobody), " +
				vigil.CACertSecret + " (ca.crt, which clients mount),\n" +
				vigil.DatapathTLSSecret + " and " + vigil.ManagerTLSSecret + " (ECDSA P-256 serving certificates for the Services " +
				vigil.DatapathService + " and " + vigil.ManagerService + ":\nNAME, NAME.NS, NAME.NS.svc, NAME.NS.svc.DOMAIN; the datapath's also for each of its servers,\n" +
				"*." + vigil.DatapathPeersService + ".NS.svc and *." + vigil.DatapathPeersService + ".NS.svc.DOMAIN), and " +
				vigil.APITokenSecret + " (the manager API's bearer token, one for every replica).\n" +
				"Run it again at will: valid Secrets are kept as they are. To renew, delete a Secret and run it again\n" +
				"(deleting " + vigil.CASecret + " needs the certificates it signed deleted too; then restart the pods that mount them).",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: flagCertsNamespace, Value: vigil.Namespace, EnvVars: []string{"POD_NAMESPACE"},
					Usage: "namespace of the Services and of the Secrets"},
				&cli.StringFlag{Name: flagKubeconfig, EnvVars: []string{"KUBECONFIG"}, TakesFile: true,
					Usage: "kubeconfig (needs get and create on Secrets in --" + flagCertsNamespace + "); default: the in-cluster service account"},
				&cli.StringFlag{Name: flagCertsClusterDomain, Value: plan.ClusterDomain, Usage: "the cluster's DNS domain, the last of the certificates' names"},
				&cli.DurationFlag{Name: flagCertsCAValidity, Value: plan.CAValidity,
					Usage: fmt.Sprintf("lifetime of a new CA, %s to %s", pki.MinValidity, pki.MaxValidity)},
				&cli.DurationFlag{Name: flagCertsValidity, Value: plan.CertValidity,
					Usage: fmt.Sprintf("lifetime of a new serving certificate, %s to --%s (never past the CA's expiry)", pki.MinValidity, flagCertsCAValidity)},
				&cli.DurationFlag{Name: flagCertsTimeout, Value: time.Minute, Usage: "give up after this long"},
			},
			Action: certsEnsure,
		}},
	}
}

func certsEnsure(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("certs ensure takes no arguments (got %q)", c.Args().Slice())
	}
	plan := pki.DefaultPlan(c.String(flagCertsNamespace))
	plan.ClusterDomain = c.String(flagCertsClusterDomain)
	plan.CAValidity, plan.CertValidity = c.Duration(flagCertsCAValidity), c.Duration(flagCertsValidity)
	if err := plan.Validate(); err != nil {
		return fmt.Errorf("certs ensure: %w (flags --%s, --%s, --%s, --%s)", err, flagCertsNamespace, flagCertsClusterDomain, flagCertsCAValidity, flagCertsValidity)
	}
	cfg, err := restConfig(runOptions{kubeconfig: c.String(flagKubeconfig), qps: 5, burst: 10})
	if err != nil {
		return err
	}
	cfg.UserAgent = "vigil-manager-certs/" + vigil.Version
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("--%s: %w", flagKubeconfig, err)
	}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration(flagCertsTimeout))
	defer cancel()
	var out []pki.Outcome
	for i := 0; i < certsEnsureAttempts; i++ {
		out, err = pki.Ensure(ctx, cs.CoreV1().Secrets(plan.Namespace), plan, time.Now())
		if !errors.Is(err, pki.ErrConflict) {
			break
		}
	}
	printOutcomes(c.App.Writer, plan.Namespace, out)
	if err != nil {
		return fmt.Errorf("certs ensure: %w", err)
	}
	return nil
}

// printOutcomes writes one line per Secret: created or kept, and its expiry.
func printOutcomes(w io.Writer, ns string, out []pki.Outcome) {
	for _, o := range out {
		what := "kept"
		if o.Created {
			what = "created"
		}
		line := []string{"secret", ns + "/" + o.Secret, what}
		if !o.Expires.IsZero() {
			line = append(line, "expires", o.Expires.UTC().Format(time.RFC3339))
		}
		if o.RenewSoon {
			line = append(line, "- renew it: kubectl -n", ns, "delete secret", o.Secret, "and run certs ensure again")
		}
		fmt.Fprintln(w, strings.Join(line, " "))
	}
}
