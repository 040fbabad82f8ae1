package raftstate

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is Raft's TCP stream layer for a server whose members reach
// it at another address than the one it listens on (Config.Advertise): a
// stable DNS name of a StatefulSet's pod while it listens on 0.0.0.0, or an
// address behind a NAT. hashicorp/raft's own TCP transport advertises
// only a resolved IP, which a restarted pod does not keep; every dial here
// resolves the member's address afresh.
type streamLayer struct {
	net.Listener
	advertise advertisedAddr
}

// advertisedAddr is an address as the members know it, unresolved.
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

// Addr is the address the other members reach this one at.
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// Dial connects to a member.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", string(address))
}

// listenAdvertised listens on listen for a transport that advertises
// advertise.
func listenAdvertised(listen, advertise string) (*streamLayer, error) {
	if err := validAddress("raft advertise address", advertise); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("raft transport on %s: %w", listen, err)
	}
	return &streamLayer{Listener: ln, advertise: advertisedAddr(advertise)}, nil
}
