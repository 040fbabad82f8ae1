package enginenode

import (
	"fmt"
	"net"

	"github.com/vigil-storage/vigil/datapath"
)

// checkDatapathFlags checks how the engine reaches the datapath: host:port,
// and plaintext only on loopback unless --datapath-insecure (a CA file means
// TLS). The CA file itself is read by the dialer.
func checkDatapathFlags(d DialConfig) error {
	host, _, err := net.SplitHostPort(d.Addr)
	if err != nil {
		return fmt.Errorf("--datapath %q: want host:port: %v", d.Addr, err)
	}
	switch {
	case d.CAFile != "" && d.Insecure:
		return fmt.Errorf("--datapath-ca-file and --datapath-insecure contradict each other: give the CA to verify the datapath over TLS, or --datapath-insecure for plaintext, not both")
	case d.CAFile == "" && !d.Insecure && !datapath.IsLoopback(host):
		return fmt.Errorf("--datapath %s is not on loopback: give --datapath-ca-file (the CA that signed the datapath's certificate) to reach it over TLS, or --datapath-insecure for plaintext", d.Addr)
	}
	return nil
}
