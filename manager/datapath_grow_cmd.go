package manager

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/internal/cliflags"
)

// Flags of `vigil-datapath add-server`.
const (
	flagAddServerID        = "server-id"
	flagAddServerRaft      = "raft-address"
	flagAddServerAdvertise = "advertise-address"
	flagAddServerCatchUp   = "catch-up-timeout"
)

// catchUpSlack is how many log entries a new server may trail the group by
// and count as caught up (it is promoted to voter then).
const catchUpSlack = 8

// catchUpPoll is the interval between two looks at a new server's progress.
const catchUpPoll = 500 * time.Millisecond

// datapathAddServerCommand is `vigil-datapath add-server`: an operator
// grows the control group (a lone server to three) by one running server.
func datapathAddServerCommand() *cli.Command {
	return &cli.Command{
		Name:  "add-server",
		Usage: "add a running server to the datapath's control group (grow a lone server to three)",
		Description: "Start the new server first with `serve --" + flagServeRaftJoin + " --" + flagServeRaftListen + " HOST:PORT --server-id ID` and an empty\n" +
			"data directory: it waits to be added. Then run add-server against the group's servers (--addr; the leader is\n" +
			"found among them) with the new server's id, the address the others reach its Raft transport at, and the address\n" +
			"clients reach it at. The group adds it as a non-voter (it receives the log, the majority does not count it),\n" +
			"add-server prints its progress until its applied index is within " + fmt.Sprint(catchUpSlack) + " entries of the group's, and only then\n" +
			"the group records it and makes it a voter. If it does not catch up within --" + flagAddServerCatchUp + ", add-server fails and\n" +
			"the server stays a non-voter: the group's majority and members are unchanged; run add-server again to retry.\n" +
			"Add one server at a time, and grow a group of one to three. Adding a server again with the same addresses\n" +
			"changes nothing.",
		Flags: append(datapathClientFlags(),
			&cli.StringFlag{Name: flagAddServerID, Required: true, Usage: "the new server's id (its serve --" + flagServeServerID + ")"},
			&cli.StringFlag{Name: flagAddServerRaft, Required: true,
				Usage: "host:port the group's servers reach the new server's Raft transport at (its --" + flagServeRaftAdvertise + " or --" + flagServeRaftListen + ")"},
			&cli.StringFlag{Name: flagAddServerAdvertise, Required: true,
				Usage: "host:port clients reach the new server at (its --" + flagServeAdvertise + " or --" + flagServeListen + ")"},
			&cli.DurationFlag{Name: flagAddServerCatchUp, Value: 2 * time.Minute,
				Usage: "how long the new server may take to catch up on the log as a non-voter before add-server gives up (it then stays a non-voter)"}),
		Action: datapathAddServer,
	}
}

func datapathAddServer(c *cli.Context) error {
	if c.NArg() != 0 {
		return cliflags.Usagef("add-server takes no arguments (the server is given by --%s, --%s and --%s); got %q", flagAddServerID, flagAddServerRaft, flagAddServerAdvertise, c.Args().Slice())
	}
	id, raftAddr, dpAddr := c.String(flagAddServerID), c.String(flagAddServerRaft), c.String(flagAddServerAdvertise)
	if err := checkAdvertise(flagAddServerRaft, raftAddr); err != nil {
		return err
	}
	if err := checkAdvertise(flagAddServerAdvertise, dpAddr); err != nil {
		return err
	}
	wait := c.Duration(flagAddServerCatchUp)
	if wait <= 0 {
		return cliflags.Usagef("--%s %s: want a positive duration, such as 2m", flagAddServerCatchUp, wait)
	}
	addr := c.String("addr")
	ctx, cancel := context.WithTimeout(c.Context, 2*c.Duration("timeout")+wait)
	defer cancel()
	dp, err := dialDatapath(ctx, c, "", addr, client.WithTimeout(c.Duration("timeout")))
	if err != nil {
		return err
	}
	defer dp.Close()
	if err := dp.AddNonvoter(ctx, id, raftAddr, dpAddr); err != nil {
		return fmt.Errorf("datapath at %s: %w", addr, err)
	}
	out := c.App.Writer
	fmt.Fprintf(out, "server %s added as a non-voter; waiting up to %s for it to catch up\n", id, wait)
	joiner, err := dialDatapath(ctx, c, "", dpAddr, client.WithTimeout(catchUpPoll))
	if err != nil {
		return err
	}
	defer joiner.Close()
	if err := waitCaughtUp(ctx, out, id, wait, progressFrom(dp, joiner)); err != nil {
		return err
	}
	if err := dp.AddServer(ctx, id, raftAddr, dpAddr); err != nil {
		return fmt.Errorf("datapath at %s: make server %s a voter: %w", addr, id, err)
	}
	_, err = fmt.Fprintf(out, "server %s added to the control group as a voter (raft %s, clients %s)\n", id, raftAddr, dpAddr)
	return err
}

// catchUp is a new server's progress: the highest applied index a server
// of the group reports, and the new server's (joinerErr: it did not say).
type catchUp struct {
	group, joiner uint64
	joinerErr     error
}

// caughtUp is whether the new server applied something and trails the
// group by at most catchUpSlack entries.
func (p catchUp) caughtUp() bool {
	return p.joinerErr == nil && p.joiner > 0 && p.joiner+catchUpSlack >= p.group
}

func (p catchUp) String() string {
	if p.joinerErr != nil {
		return fmt.Sprintf("it does not answer yet (%v); the group is at index %d", p.joinerErr, p.group)
	}
	return fmt.Sprintf("applied %d of the group's %d", p.joiner, p.group)
}

// progressFrom reads the progress from the group's servers (group) and the
// new server (joiner): each one's own applied index.
func progressFrom(group, joiner *client.Client) func(context.Context) catchUp {
	return func(ctx context.Context) catchUp {
		var p catchUp
		if st, err := group.GroupStatus(ctx, false); err == nil {
			for _, s := range st.Servers {
				p.group = max(p.group, s.AppliedIndex)
			}
		}
		rep, err := joiner.Servers(ctx)
		p.joinerErr = err
		for _, s := range rep.Servers {
			if s.Self {
				p.joiner = s.AppliedIndex
			}
		}
		return p
	}
}

// waitCaughtUp polls progress until the new server caught up, printing each
// change to out, or fails once wait is over, the server left a non-voter.
func waitCaughtUp(ctx context.Context, out io.Writer, id string, wait time.Duration, progress func(context.Context) catchUp) error {
	deadline := time.Now().Add(wait)
	last := ""
	for {
		p := progress(ctx)
		if line := p.String(); line != last {
			fmt.Fprintf(out, "server %s catching up: %s\n", id, line)
			last = line
		}
		if p.caughtUp() {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("server %s did not catch up within %s (%s): it stays in the group as a non-voter, which the majority does not count "+
				"and no volume is placed on, so the group's majority and members are unchanged; see its log, then run add-server again to retry", id, wait, p)
		}
		select {
		case <-ctx.Done():
		case <-time.After(catchUpPoll):
		}
	}
}
