package manager

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/raftstate"
	"github.com/vigil-storage/vigil/internal/cliflags"
)

// Flags of `vigil-datapath force-replica`.
const (
	flagForceVolume  = "volume"
	flagForceReplica = "replica"
	flagForceReason  = "reason"
	flagForceYes     = "yes"
)

// datapathForceReplicaCommand is `vigil-datapath force-replica`: an
// operator lets a volume that lost a majority of its replicas serve from
// the ones left.
func datapathForceReplicaCommand() *cli.Command {
	return &cli.Command{
		Name:  "force-replica",
		Usage: "let a volume that lost a majority of its replicas serve from the replicas left (prints the plan; --yes does it)",
		Description: "A replicated volume whose in-sync replicas on servers that answer are fewer than a majority of its replicas\n" +
			"suspends its I/O: it never serves data that may be stale, and waits for its servers to return. When they will\n" +
			"not (a disk or a machine is lost for good), force-replica makes the replicas you name (on servers that answer)\n" +
			"the volume's whole replica set, in sync, at its next member epoch; the other replicas leave the set, and each of\n" +
			"their servers removes its data file (volumes/<id>.img) as it applies the change once it is back: copy such a\n" +
			"file away before you start its server again if you may want it. The leader refuses a volume that still has quorum, a replica on a server\n" +
			"that does not answer, and an out-of-sync replica named next to an in-sync one. It needs the control group\n" +
			"itself to have a leader (a majority of its servers): it cannot help when the group lost its majority.\n" +
			"\n" +
			"The risk: a forced in-sync replica holds every acknowledged write (a write is acknowledged only once every\n" +
			"in-sync replica took it); a forced out-of-sync replica lacks every write acknowledged since it fell out of\n" +
			"sync, and those writes are lost from the volume. The volume keeps only the forced copies until new ones are\n" +
			"rebuilt from them. A replica left out whose server is alive but cut off from the group has not applied the\n" +
			"force: it may still serve reads of the old copy to an engine that has not learned of it (a fenced node's\n" +
			"included). Before a force that leaves out the holder, power its server off or cut it off from every node.\n" +
			"Without --" + flagForceYes + " it prints the volume, its replicas and their states, what would change\n" +
			"and the data that may be lost, and changes nothing. With --" + flagForceYes + " it forces and prints the new member epoch;\n" +
			"the leader logs it at Warn and records who asked, when and your --" + flagForceReason + ".",
		Flags: append(datapathClientFlags(),
			&cli.StringFlag{Name: flagForceVolume, Required: true, Usage: "the volume's id (vol-…, as `status` lists it)"},
			&cli.StringFlag{Name: flagForceReplica, Required: true, Usage: "the replicas to serve from: server ids, comma-separated (SERVER[,SERVER]), as `status` lists them"},
			&cli.StringFlag{Name: flagForceReason, Required: true,
				Usage: fmt.Sprintf("why the volume may serve from these replicas (1 to %d characters), recorded with the force", raftstate.MaxForceReason)},
			&cli.BoolFlag{Name: flagForceYes, Usage: "force; without it, print what would be done and change nothing"}),
		Action: datapathForceReplica,
	}
}

// forceArgs checks the command line: no arguments, a volume id, one or
// more distinct server ids, a reason.
func forceArgs(c *cli.Context) (datapath.ForceRequest, error) {
	req := datapath.ForceRequest{VolumeID: c.String(flagForceVolume), Reason: c.String(flagForceReason), DryRun: !c.Bool(flagForceYes)}
	if c.NArg() != 0 {
		return req, cliflags.Usagef("force-replica takes no arguments (the volume is --%s, the replicas --%s); got %q", flagForceVolume, flagForceReplica, c.Args().Slice())
	}
	if err := datapath.ValidVolumeID(req.VolumeID); err != nil {
		return req, cliflags.Usagef("--%s %q: %v", flagForceVolume, req.VolumeID, err)
	}
	for _, id := range strings.Split(c.String(flagForceReplica), ",") {
		id = strings.TrimSpace(id)
		switch {
		case id == "":
			return req, cliflags.Usagef("--%s %q: an empty server id; want SERVER[,SERVER], the ids `status` lists", flagForceReplica, c.String(flagForceReplica))
		case slices.Contains(req.Replicas, id):
			return req, cliflags.Usagef("--%s %q: server %s is named twice", flagForceReplica, c.String(flagForceReplica), id)
		}
		req.Replicas = append(req.Replicas, id)
	}
	if err := raftstate.ValidForceReason(req.Reason); err != nil {
		return req, cliflags.Usagef("--%s: %v", flagForceReason, err)
	}
	return req, nil
}

func datapathForceReplica(c *cli.Context) error {
	req, err := forceArgs(c)
	if err != nil {
		return err
	}
	addr := c.String("addr")
	ctx, cancel := context.WithTimeout(c.Context, 2*c.Duration("timeout"))
	defer cancel()
	dp, err := dialDatapath(ctx, c, "", addr, client.WithTimeout(c.Duration("timeout")))
	if err != nil {
		return err
	}
	defer dp.Close()
	vols, err := dp.GroupVolumes(ctx)
	if err != nil {
		return fmt.Errorf("datapath at %s: volumes: %w", addr, err)
	}
	i := slices.IndexFunc(vols, func(v datapath.GroupVolume) bool { return v.ID == req.VolumeID })
	if i < 0 {
		return fmt.Errorf("datapath at %s has no volume %s; `status` lists its volumes", addr, req.VolumeID)
	}
	req.MemberEpoch = vols[i].MemberEpoch
	plan, err := dp.ForceReplicas(ctx, req)
	if err != nil {
		return fmt.Errorf("datapath at %s: force replicas of volume %s: %w", addr, req.VolumeID, err)
	}
	return printForcePlan(c.App.Writer, plan)
}

// printForcePlan prints the volume's replicas before, what changes, and the
// data that may be lost; then either the new member epoch or that nothing
// changed.
func printForcePlan(out io.Writer, p datapath.ForcePlan) error {
	b := p.Before
	fmt.Fprintf(out, "volume %s (%s): holder %s, member epoch %d\n", p.VolumeID, p.Name, b.Holder, b.MemberEpoch)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tSTATE\tSERVER\tFORCED")
	for _, id := range b.Replicas {
		state, server, forced := datapath.ReplicaFaulted, "answers", "no: leaves the replica set"
		if slices.Contains(b.InSync, id) {
			state = datapath.ReplicaInSync
		}
		if slices.Contains(p.Unreachable, id) {
			server = "unreachable"
		}
		if slices.Contains(p.After.Replicas, id) {
			forced = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", id, state, server, forced)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "data that may be lost:", forceLoss(p))
	if !slices.Contains(p.After.Replicas, b.Holder) {
		fmt.Fprintf(out, "the holder %s is left out: until its server applies the force it may still serve reads of the old copy; power it off or cut it off from every node first\n", b.Holder)
	}
	if !p.Done {
		_, err := fmt.Fprintf(out, "would serve from %s only (holder %s) at member epoch %d\nnothing changed: run again with --%s to force\n",
			strings.Join(p.After.Replicas, ", "), p.After.Holder, p.After.MemberEpoch, flagForceYes)
		return err
	}
	_, err := fmt.Fprintf(out, "forced: volume %s serves from %s only (holder %s), new member epoch %d\n",
		p.VolumeID, strings.Join(p.After.Replicas, ", "), p.After.Holder, p.After.MemberEpoch)
	return err
}

// forceLoss says what the force loses: nothing acknowledged when the forced
// replicas were in sync (every acknowledged write reached every in-sync
// replica); otherwise every write acknowledged since they fell out of sync.
func forceLoss(p datapath.ForcePlan) string {
	var left []string
	for _, id := range p.Before.Replicas {
		if !slices.Contains(p.After.Replicas, id) {
			left = append(left, id)
		}
	}
	kept := "; the servers of " + strings.Join(left, ", ") + " remove their copies when they are back and apply the force"
	if len(p.After.Replicas) > 0 && slices.Contains(p.Before.InSync, p.After.Replicas[0]) {
		return "no acknowledged write (every acknowledged write reached every in-sync replica, the forced ones too); " +
			"writes not yet acknowledged when the servers were lost may be, as after any crash" + kept
	}
	return "every write acknowledged since " + strings.Join(p.After.Replicas, ", ") + " fell out of sync: those reached only " +
		strings.Join(p.Before.InSync, ", ") + ", which leave the replica set" + kept
}
