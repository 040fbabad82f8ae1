package raftstate

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/vigil-storage/vigil/datapath"
)

// streamLayer is Raft's TCP stream layer for a server whose members reach
// it at another address than the one it listens on (Config.Advertise): a
// stable DNS name of a StatefulSet's pod while it listens on 0.0.0.0, or an
// address behind a NAT. hashicorp/raft's own TCP transport advertises
// only a resolved IP, which a restarted pod does not keep; every dial here
// resolves the member's address afresh.
//
// With PeerTLS, every connection is mutual TLS: the listener accepts only
// peers whose certificate PeerTLS.Accept takes, and each dial verifies the
// dialed member for its host.
type streamLayer struct {
	net.Listener
	advertise advertisedAddr
	dialTLS   *tls.Config // nil: plain TCP
}

// PeerTLS is the mutual TLS of the Raft transport (datapath.PeerTLS makes
// both from the servers' certificate and CA).
type PeerTLS struct {
	// Accept is the listener's: it must ask for and verify the peer's
	// certificate.
	Accept *tls.Config
	// Dial is a dialer's; each dial uses a clone with ServerName set to the
	// dialed host.
	Dial *tls.Config
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
	if s.dialTLS == nil {
		return d.Dial("tcp", string(address))
	}
	host, _, err := net.SplitHostPort(string(address))
	if err != nil {
		return nil, fmt.Errorf("raft peer %s: %w", address, err)
	}
	cfg := s.dialTLS.Clone()
	cfg.ServerName = host
	return tls.DialWithDialer(&d, "tcp", string(address), cfg)
}

// listenAdvertised listens on listen for a transport that advertises
// advertise (the listener's own address when empty), over mutual TLS when
// peer is set.
func listenAdvertised(listen, advertise string, peer *PeerTLS) (*streamLayer, error) {
	if advertise != "" {
		if err := validAddress("raft advertise address", advertise); err != nil {
			return nil, err
		}
	}
	if peer != nil && (peer.Accept == nil || peer.Dial == nil || peer.Accept.ClientAuth < tls.RequireAnyClientCert) {
		return nil, fmt.Errorf("%w: raft TLS needs an accepting configuration that asks for the peer's certificate, and a dialing one", datapath.ErrInvalidArgument)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("raft transport on %s: %w", listen, err)
	}
	if advertise == "" {
		advertise = ln.Addr().String()
	}
	s := &streamLayer{Listener: ln, advertise: advertisedAddr(advertise)}
	if peer != nil {
		s.Listener, s.dialTLS = tls.NewListener(ln, peer.Accept), peer.Dial
	}
	return s, nil
}
