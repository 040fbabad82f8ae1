package manager

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"

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

// datapathDial is how a manager command reaches the datapath as the
// controller: checked from the flags first, dialed later.
type datapathDial struct {
	addrs                           []string // the servers; the first is dialed
	addr, tokenFile, caFile, prefix string   // addr: addrs[0]
	insecure                        bool
}

// parseDatapathDial reads the token, CA and plaintext flags under prefix for
// the datapath's servers (list: host:port or a comma-separated list, see
// datapath.ParseServerList) and refuses a bad list, contradictions and
// plaintext off loopback, naming the flags; it reads no file (dial does).
func parseDatapathDial(c *cli.Context, prefix, list string) (datapathDial, error) {
	d := datapathDial{tokenFile: c.String(prefix + flagSuffixTokenFile), caFile: c.String(prefix + flagSuffixCAFile),
		insecure: c.Bool(prefix + flagSuffixInsecure), prefix: prefix}
	addrs, err := datapath.ParseServerList(list)
	if err != nil {
		return d, fmt.Errorf("--%s: %w", addressFlag(prefix), err)
	}
	d.addrs, d.addr = addrs, addrs[0]
	switch {
	case d.tokenFile == "":
		return d, fmt.Errorf("--%s%s: no file given; it must hold this caller's datapath token", prefix, flagSuffixTokenFile)
	case d.caFile != "" && d.insecure:
		return d, fmt.Errorf("--%s%s and --%s%s contradict each other: give the CA to verify the datapath over TLS, or --%s%s for plaintext, not both",
			prefix, flagSuffixCAFile, prefix, flagSuffixInsecure, prefix, flagSuffixInsecure)
	}
	for _, a := range addrs {
		if host, _, _ := net.SplitHostPort(a); d.caFile == "" && !d.insecure && !datapath.IsLoopback(host) {
			return d, fmt.Errorf("datapath %s is not on loopback: give --%s%s (the CA that signed the datapath's certificate) to reach it over TLS, or --%s%s for plaintext",
				a, prefix, flagSuffixCAFile, prefix, flagSuffixInsecure)
		}
	}
	return d, nil
}

// addressFlag is the name of the servers flag that goes with prefix:
// --datapath beside --datapath-token-file, --addr beside --token-file.
func addressFlag(prefix string) string {
	if prefix == "" {
		return "addr"
	}
	return strings.TrimSuffix(prefix, "-")
}

// dial connects with the token file (read again when it changes: a projected
// token rotates) and TLS as the flags said; opts come after.
func (d datapathDial) dial(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	all := []client.Option{client.WithTokenFile(d.tokenFile)}
	switch {
	case d.caFile != "":
		all = append(all, client.WithCAFile(d.caFile))
	case d.insecure:
		all = append(all, client.WithInsecure())
		for _, a := range d.addrs {
			if host, _, _ := net.SplitHostPort(a); !datapath.IsLoopback(host) {
				slog.Warn("datapath client: plaintext to an address off loopback (--"+d.prefix+flagSuffixInsecure+"): tokens and data cross the network in the clear",
					"datapath", a)
				break
			}
		}
	}
	all = append(all, client.WithServers(d.addrs[1:]...))
	dp, err := client.Dial(ctx, d.addr, "", append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("datapath %s: %w", d.addr, err)
	}
	return dp, nil
}

// dialDatapath is parseDatapathDial then dial.
func dialDatapath(ctx context.Context, c *cli.Context, prefix, addr string, opts ...client.Option) (*client.Client, error) {
	d, err := parseDatapathDial(c, prefix, addr)
	if err != nil {
		return nil, err
	}
	return d.dial(ctx, opts...)
}
