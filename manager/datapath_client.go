package manager

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
)

// Flags with which a manager command reaches the datapath as the controller:
// prefix is "datapath-" for `csi serve` and `run`, "" for `datapath status`
// (whose flags are --addr, --token-file, --ca-file, --insecure).
const (
	flagSuffixTokenFile = "token-file"
	flagSuffixCAFile    = "ca-file"
	flagSuffixInsecure  = "insecure"
)

// datapathTLSFlags are the CA and plaintext flags of a datapath client.
func datapathTLSFlags(prefix string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: prefix + flagSuffixCAFile, EnvVars: []string{"VIGIL_DATAPATH_CA_FILE"}, TakesFile: true,
			Usage: "CA certificate(s) (PEM) that signed the datapath's TLS certificate: the client then speaks TLS and verifies the server"},
		&cli.BoolFlag{Name: prefix + flagSuffixInsecure,
			Usage: "reach the datapath in plaintext although its address is not loopback (tokens and data cross the network in the clear); without a CA file only loopback addresses are allowed"},
	}
}

// dialDatapath connects to the datapath at addr as the controller, with the
// token file (read again when it changes: a projected token rotates) and the
// TLS flags under prefix; opts come after.
func dialDatapath(ctx context.Context, c *cli.Context, prefix, addr string, opts ...client.Option) (*client.Client, error) {
	tokenFile := c.String(prefix + flagSuffixTokenFile)
	if tokenFile == "" {
		return nil, fmt.Errorf("--%s%s: no file given; it must hold this caller's datapath token", prefix, flagSuffixTokenFile)
	}
	all := []client.Option{client.WithTokenFile(tokenFile)}
	ca, insecure := c.String(prefix+flagSuffixCAFile), c.Bool(prefix+flagSuffixInsecure)
	switch {
	case ca != "" && insecure:
		return nil, fmt.Errorf("--%s%s and --%s%s contradict each other: give the CA to verify the datapath over TLS, or --%s%s for plaintext, not both",
			prefix, flagSuffixCAFile, prefix, flagSuffixInsecure, prefix, flagSuffixInsecure)
	case ca != "":
		all = append(all, client.WithCAFile(ca))
	case insecure:
		all = append(all, client.WithInsecure())
		if host, _, err := net.SplitHostPort(addr); err == nil && !datapath.IsLoopback(host) {
			slog.Warn("datapath client: plaintext to an address off loopback (--"+prefix+flagSuffixInsecure+"): tokens and data cross the network in the clear", "datapath", addr)
		}
	default:
		if host, _, err := net.SplitHostPort(addr); err == nil && !datapath.IsLoopback(host) {
			return nil, fmt.Errorf("datapath %s is not on loopback: give --%s%s (the CA that signed the datapath's certificate) to reach it over TLS, or --%s%s for plaintext",
				addr, prefix, flagSuffixCAFile, prefix, flagSuffixInsecure)
		}
	}
	dp, err := client.Dial(ctx, addr, "", append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("datapath %s: %w", addr, err)
	}
	return dp, nil
}
