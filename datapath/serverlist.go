package datapath

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ServerListUsage is how every client's datapath address flag describes its
// value (the manager, the CSI controller, the engines, the datapath's own
// client commands), parsed by ParseServerList.
const ServerListUsage = "the datapath's servers: host:port, or a comma-separated list host:port,host:port,... " +
	"(every server of its control group); the first is dialed, and the client finds the leader and each volume's server among them"

// ParseServerList parses a datapath address flag: one host:port or a
// comma-separated list of them, in the order given. It refuses an empty
// list, an empty item, an item that is not host:port with a host and a port
// from 1 to 65535, and an address given twice, naming the item and what is
// allowed. The first address is the one a client dials.
func ParseServerList(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("datapath servers: empty; want host:port or a comma-separated list host:port,host:port")
	}
	items := strings.Split(s, ",")
	out := make([]string, 0, len(items))
	seen := make(map[string]int, len(items))
	for i, item := range items {
		item = strings.TrimSpace(item)
		if err := checkServerAddress(item); err != nil {
			return nil, fmt.Errorf("datapath servers %q: item %d: %w; want host:port or a comma-separated list host:port,host:port", s, i+1, err)
		}
		if j, dup := seen[item]; dup {
			return nil, fmt.Errorf("datapath servers %q: %s is given twice (items %d and %d); list each server once", s, item, j+1, i+1)
		}
		seen[item] = i
		out = append(out, item)
	}
	return out, nil
}

// checkServerAddress checks one item of a server list.
func checkServerAddress(item string) error {
	if item == "" {
		return fmt.Errorf("empty")
	}
	host, port, err := net.SplitHostPort(item)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", item, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", item)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 1 to 65535", item, port)
	}
	return nil
}
