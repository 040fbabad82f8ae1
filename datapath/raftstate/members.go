package raftstate

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/vigil-storage/vigil/datapath"
)

// The group's record of its members. Raft's own configuration knows each
// voter's id and Raft address only; the state machine records, with add-
// server entries, where each serves clients (its datapath address) and its
// node, which placement, redirects and status read. Two paths fill it:
//
//   - each server records itself whenever it leads and finds its record
//     missing or different (it knows its own addresses best);
//   - servers bootstrapped together (Start with peers) know each other's
//     addresses from the peer list, so the first of them to lead records
//     every peer the group has no record of yet, one add-server entry each,
//     at once: a follower that never led is a member from the start, and a
//     create may place its data there (TestStart_EveryPeerRecordedAtOnce).
//
// One add-server entry per peer rather than one entry for all: a server of
// the release before knows add-server, so a group of both releases applies
// the same record; should the leader stop half-way, the next leader (also
// bootstrapped with the list) records the rest.

// recordMembers records this server, then the bootstrap peers the group has
// no record of, when it leads; a failure is logged and left to the next
// leader.
func (g *Group) recordMembers() {
	if g.closed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.applyTimeout)
	defer cancel()
	if err := g.recordSelf(ctx); err != nil {
		return // no longer the leader, or cut off: the next leader records itself
	}
	if err := g.recordPeers(ctx); err != nil {
		g.logger.Warn("the bootstrap peers' records in the group not written", "error", err)
	}
}

// recordSelf records this server (its node and datapath address) in the
// group when it leads and the group's record of it is missing or
// different: without its record, clients refused by a follower are not
// told where the leader serves, and placement leaves it out.
func (g *Group) recordSelf(ctx context.Context) error {
	self := g.self.Load()
	if self == nil {
		return nil
	}
	members, err := g.Servers(ctx) // a barrier: the record as committed
	if err != nil {
		return err
	}
	for _, m := range members {
		if m == *self {
			return nil
		}
	}
	if _, err := g.apply(ctx, Command{Op: OpAddServer, Member: self}); err != nil {
		g.logger.Warn("this server's record in the group not updated", "server", self.ID, "error", err)
		return err
	}
	return nil
}

// recordPeers records each peer this server bootstrapped the group with
// that the group has no record of, as the peer list gives it (one listed
// with its datapath address), provided Raft
// still has it as a voter at that Raft address (a peer removed since is not
// brought back). A record the group has is never overwritten: the peer's
// own, written when it leads, is the one that counts.
func (g *Group) recordPeers(ctx context.Context) error {
	peers := g.bootPeers.Load()
	if peers == nil {
		return nil
	}
	missing, err := g.unrecordedPeers(ctx, *peers)
	if err != nil {
		return err
	}
	for _, p := range missing {
		if _, err := g.apply(ctx, Command{Op: OpAddServer, Member: &p}); err != nil {
			return err
		}
	}
	return nil
}

// unrecordedPeers is the peers, other than this server, listed with a
// datapath address, that are voters at their listed Raft address and have
// no record in the group (current). A peer listed without one (the form of
// before) is left to record itself when it leads: a record without it
// serves neither placement nor redirects.
func (g *Group) unrecordedPeers(ctx context.Context, peers []Server) ([]Server, error) {
	members, err := g.Servers(ctx)
	if err != nil {
		return nil, err
	}
	recorded := map[string]bool{}
	for _, m := range members {
		recorded[m.ID] = true
	}
	f := g.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	voters := map[string]string{}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters[string(s.ID)] = string(s.Address)
		}
	}
	var out []Server
	for _, p := range peers {
		if p.ID != g.id && p.DatapathAddress != "" && !recorded[p.ID] && voters[p.ID] == p.RaftAddress {
			out = append(out, p)
		}
	}
	return out, nil
}

// memberDialWait bounds AddMember's check that the new server's Raft
// address answers.
const memberDialWait = 3 * time.Second

// AddMember adds a server to the group (datapath.Control): it checks the
// member, then that its Raft address answers (a voter that is not up would
// leave a group of one waiting for it: two voters need both), and adds it
// (AddServer). The leader only.
func (g *Group) AddMember(ctx context.Context, id, raftAddress, datapathAddress string) error {
	m := Server{ID: id, RaftAddress: raftAddress, DatapathAddress: datapathAddress}
	if err := m.validate(); err != nil {
		return err
	}
	if datapathAddress == "" {
		return fmt.Errorf("%w: server %s: no datapath address; give the host:port it serves clients at", datapath.ErrInvalidArgument, id)
	}
	if err := g.CheckLeader(); err != nil {
		return err
	}
	if m.ID != g.id {
		if err := raftAnswers(id, raftAddress); err != nil {
			return err
		}
	}
	return g.AddServer(ctx, m)
}

// AddNonvoter adds a running server to the group as a non-voter, the leader
// only: it receives the log and applies it, but the majority does not count
// it, so a server that is slow or dies does not cost the group its
// majority. It is not recorded as a member (no volume is placed on it)
// until AddMember makes it a voter once it caught up. A server that is a
// voter already is left as it is. Its Raft address must answer.
func (g *Group) AddNonvoter(ctx context.Context, id, raftAddress string) error {
	if err := firstErr(validServerID(id), validAddress("raft address of server "+id, raftAddress)); err != nil {
		return err
	}
	if err := g.CheckLeader(); err != nil {
		return err
	}
	if id == g.id {
		return fmt.Errorf("%w: server %s is this group's leader, a voter already", datapath.ErrInvalidArgument, id)
	}
	f := g.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id && s.Suffrage == raft.Voter {
			if string(s.Address) != raftAddress {
				return fmt.Errorf("%w: server %s is a voter at raft address %s, not %s", datapath.ErrInvalidArgument, id, s.Address, raftAddress)
			}
			return nil
		}
	}
	if err := raftAnswers(id, raftAddress); err != nil {
		return err
	}
	ctx, cancel := g.deadline(ctx)
	defer cancel()
	return g.wait(ctx, "add non-voter "+id, g.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddress), 0, g.applyTimeout))
}

// raftAnswers checks that server id's Raft transport at raftAddress
// accepts a connection: a server added to the group must be running.
func raftAnswers(id, raftAddress string) error {
	conn, err := net.DialTimeout("tcp", raftAddress, memberDialWait)
	if err != nil {
		return fmt.Errorf("%w: server %s's raft address %s does not answer (%v): start it first with `serve --raft-join`, then add it",
			datapath.ErrInvalidArgument, id, raftAddress, err)
	}
	_ = conn.Close()
	return nil
}
