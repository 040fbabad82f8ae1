package manager

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/internal/cliflags"
)

// Flags of `vigil-datapath add-server`.
const (
	flagAddServerID        = "server-id"
	flagAddServerRaft      = "raft-address"
	flagAddServerAdvertise = "advertise-address"
)

// datapathAddServerCommand is `vigil-datapath add-server`: an operator
// grows the control group (a lone server to three) by one running server.
func datapathAddServerCommand() *cli.Command {
	return &cli.Command{
		Name:  "add-server",
		Usage: "add a running server to the datapath's control group (grow a lone server to three)",
		Description: "Start the new server first with `serve --" + flagServeRaftJoin + " --" + flagServeRaftListen + " HOST:PORT --server-id ID` and an empty\n" +
			"data directory: it waits to be added. Then run add-server against the group's servers (--addr; the leader is\n" +
			"found among them) with the new server's id, the address the others reach its Raft transport at, and the address\n" +
			"clients reach it at. The group records it and makes it a voter; its state then comes from the leader. Add one\n" +
			"server at a time, and grow a group of one to three (a group of two needs both servers for a majority).\n" +
			"Adding a server again with the same addresses changes nothing.",
		Flags: append(datapathClientFlags(),
			&cli.StringFlag{Name: flagAddServerID, Required: true, Usage: "the new server's id (its serve --" + flagServeServerID + ")"},
			&cli.StringFlag{Name: flagAddServerRaft, Required: true,
				Usage: "host:port the group's servers reach the new server's Raft transport at (its --" + flagServeRaftAdvertise + " or --" + flagServeRaftListen + ")"},
			&cli.StringFlag{Name: flagAddServerAdvertise, Required: true,
				Usage: "host:port clients reach the new server at (its --" + flagServeAdvertise + " or --" + flagServeListen + ")"}),
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
	addr := c.String("addr")
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	dp, err := dialDatapath(ctx, c, "", addr, client.WithTimeout(c.Duration("timeout")))
	if err != nil {
		return err
	}
	defer dp.Close()
	if err := dp.AddServer(ctx, id, raftAddr, dpAddr); err != nil {
		return fmt.Errorf("datapath at %s: %w", addr, err)
	}
	_, err = fmt.Fprintf(c.App.Writer, "server %s added to the control group (raft %s, clients %s)\n", id, raftAddr, dpAddr)
	return err
}
