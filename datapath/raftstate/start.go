package raftstate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/vigil-storage/vigil/datapath"
)

// InProcessAddress is the Raft address of a lone server whose Raft runs in
// process (InProcessTransport): a one-member group sends no message to
// anyone, so it needs no port. Restarted with a listen address, the server
// records its new address at its next start (Start).
const InProcessAddress = "in-process:1"

// InProcessTransport is the transport of a lone server with no listen
// address.
func InProcessTransport() raft.Transport {
	_, tr := raft.NewInmemTransport(InProcessAddress)
	return tr
}

// Start opens this server's member of the group in cfg.Dir and brings it
// into service: the first time, it bootstraps a group of peers (none: a
// one-member group of this server alone); it waits for a leader; and when
// this server leads, it records itself (node, datapath address, and its
// Raft address if that moved) and reads through a barrier, so its applied
// state is current when Start returns; a group bootstrapped here, it also
// records every peer with the addresses the list gives (recordPeers), so
// each is a member with its datapath address before it ever leads. A
// follower returns once it knows a leader; its state catches up as it
// applies the log. With cfg.Join it bootstraps nothing: a new server waits
// until the leader of a running group adds it (AddMember). self.RaftAddress
// empty means the address the transport listens on.
func Start(ctx context.Context, cfg Config, self Server, peers []Server) (*Group, error) {
	if cfg.ID != self.ID {
		return nil, fmt.Errorf("%w: config id %q and member id %q differ", datapath.ErrInvalidArgument, cfg.ID, self.ID)
	}
	g, err := Open(cfg)
	if err != nil {
		return nil, err
	}
	if self.RaftAddress == "" {
		self.RaftAddress = g.Address()
	}
	if cfg.Join && len(peers) > 0 {
		return nil, errors.Join(fmt.Errorf("%w: server %s: join a running group or bootstrap one with peers, not both", datapath.ErrInvalidArgument, self.ID), g.Close())
	}
	if len(peers) == 0 && !cfg.Join {
		peers = []Server{self}
	}
	if err := g.start(ctx, self, peers); err != nil {
		return nil, errors.Join(err, g.Close())
	}
	return g, nil
}

func (g *Group) start(ctx context.Context, self Server, peers []Server) error {
	g.self.Store(&self)
	if peers != nil {
		switch err := g.Bootstrap(peers); {
		case err == nil:
			g.bootPeers.Store(&peers)
		case !errors.Is(err, ErrHasState):
			return err
		}
	}
	if err := g.waitLeader(ctx); err != nil {
		return err
	}
	if !g.IsLeader() {
		return nil
	}
	if err := g.AddServer(ctx, self); err != nil {
		return fmt.Errorf("record server %s in the group: %w", self.ID, err)
	}
	if err := g.recordPeers(ctx); err != nil {
		return fmt.Errorf("record the group's bootstrap peers: %w", err)
	}
	_, err := g.Servers(ctx) // a barrier: every committed entry applied here
	return err
}

// waitLeader waits until this server knows a leader.
func (g *Group) waitLeader(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if id, _ := g.Leader(); id != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: server %s found no leader (%v): is a majority of the group's servers up and reachable?", ErrNotLeader, g.id, ctx.Err())
		case <-tick.C:
		}
	}
}

// ValidServerID checks a server id: 1 to 253 printable characters without
// white space.
func ValidServerID(id string) error { return validServerID(id) }

// ParsePeers reads a peer list "ID=RAFT[@DATAPATH],..." (white space around
// items ignored): each server's id, the host:port of its Raft transport
// and, after @, the host:port it serves clients at, which the group then
// records for it from the start (without it, the server is recorded with
// its datapath address only once it leads). Each id and address must be
// well formed and listed once; an error names the item.
func ParsePeers(s string) ([]Server, error) {
	var out []Server
	ids, addrs := map[string]int{}, map[string]int{}
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		id, addr, ok := strings.Cut(item, "=")
		if !ok || id == "" {
			return nil, fmt.Errorf("%w: peer %d %q: want ID=HOST:PORT or ID=HOST:PORT@HOST:PORT (Raft address, then the datapath address)",
				datapath.ErrInvalidArgument, i+1, item)
		}
		raftAddr, dpAddr, _ := strings.Cut(addr, "@")
		p := Server{ID: id, RaftAddress: raftAddr, DatapathAddress: dpAddr}
		if strings.Contains(addr, "@") && dpAddr == "" {
			return nil, fmt.Errorf("%w: peer %d %q: nothing after @; want the datapath address as HOST:PORT, or no @", datapath.ErrInvalidArgument, i+1, item)
		}
		if err := p.validate(); err != nil {
			return nil, fmt.Errorf("peer %d %q: %w", i+1, item, err)
		}
		if j, dup := ids[id]; dup {
			return nil, fmt.Errorf("%w: peer %d %q: server id %s is listed twice (peers %d and %d)", datapath.ErrInvalidArgument, i+1, item, id, j, i+1)
		}
		if j, dup := addrs[raftAddr]; dup {
			return nil, fmt.Errorf("%w: peer %d %q: raft address %s is listed twice (peers %d and %d)", datapath.ErrInvalidArgument, i+1, item, raftAddr, j, i+1)
		}
		ids[id], addrs[raftAddr] = i+1, i+1
		out = append(out, p)
	}
	return out, nil
}
