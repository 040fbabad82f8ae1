package enginenode

import (
	"fmt"
	"net"

	"github.com/vigil-storage/vigil/datapath"
)

// parseDatapathFlags checks how the engine reaches the datapath: list is
// --datapath, one host:port or a comma-separated list of the servers
// (datapath.ParseServerList), the first dialed, the others handed to the
// client (Servers); plaintext only on loopback unless --datapath-insecure (a
// CA file means TLS). The CA file itself is read by the dialer.
func parseDatapathFlags(list string, d DialConfig) (DialConfig, error) {
	addrs, err := datapath.ParseServerList(list)
	if err != nil {
		return d, fmt.Errorf("--datapath: %w", err)
	}
	d.Addr, d.Servers = addrs[0], addrs[1:]
	if d.CAFile != "" && d.Insecure {
		return d, fmt.Errorf("--datapath-ca-file and --datapath-insecure contradict each other: give the CA to verify the datapath over TLS, or --datapath-insecure for plaintext, not both")
	}
	for _, a := range addrs {
		if host, _, _ := net.SplitHostPort(a); d.CAFile == "" && !d.Insecure && !datapath.IsLoopback(host) {
			return d, fmt.Errorf("--datapath %s is not on loopback: give --datapath-ca-file (the CA that signed the datapath's certificate) to reach it over TLS, or --datapath-insecure for plaintext", a)
		}
	}
	return d, nil
}
