package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/controller"
	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/internal/cliflags"
)

// datapathClearFailureCommand is `vigil-datapath clear-failure
// VOLUME`: an operator ends a volume's failure (see datapath.ErrVolumeFailed).
func datapathClearFailureCommand() *cli.Command {
	return &cli.Command{
		Name:      "clear-failure",
		Usage:     "let a failed volume take I/O again, once you have checked the disk and the volume's data",
		ArgsUsage: "VOLUME",
		Description: "A volume is failed when flushing its data file to disk (fdatasync) failed: writes acknowledged before then\n" +
			"may be lost, and a later flush could succeed without them, so the datapath refuses every read, write and flush\n" +
			"of it, across restarts, and the manager puts a " + controller.EventVolumeFailed + " Warning Event on its PersistentVolume.\n" +
			"Check the data directory's disk (kernel log, SMART), then the volume's data (fsck, the application's own\n" +
			"checks, or a restore from backup), and only then clear the failure. VOLUME is the datapath's volume id\n" +
			"(vol-…), as `datapath status` lists it under FAILED VOLUME and as the PV's spec.csi.volumeHandle.",
		Flags:  datapathClientFlags(),
		Action: datapathClearFailure,
	}
}

func datapathClearFailure(c *cli.Context) error {
	if c.NArg() != 1 {
		return cliflags.Usagef("clear-failure takes exactly one argument, the volume's id (vol-…, as `datapath status` lists it); got %d", c.NArg())
	}
	id, addr := c.Args().First(), c.String("addr")
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	dp, err := dialDatapath(ctx, c, "", addr, client.WithTimeout(c.Duration("timeout")))
	if err != nil {
		return err
	}
	defer dp.Close()
	if err := dp.ClearFailure(ctx, id); err != nil {
		if errors.Is(err, datapath.ErrNotFound) {
			return fmt.Errorf("volume %s: the datapath at %s has no such volume; `datapath status` lists its volumes", id, addr)
		}
		return fmt.Errorf("datapath at %s: %w", addr, err)
	}
	_, err = fmt.Fprintf(c.App.Writer, "volume %s: failure cleared; it takes reads, writes and flushes again\n", id)
	return err
}

// failedLister is the call printFailed makes; *client.Client has it.
type failedLister interface {
	FailedVolumes(ctx context.Context) ([]datapath.FailedVolume, error)
}

// printFailed prints the failed volumes of `datapath status`, nothing when
// there are none or the server is older than the failure latch, and a line
// saying why when they are not known.
func printFailed(ctx context.Context, out io.Writer, dp failedLister) error {
	failed, err := dp.FailedVolumes(ctx)
	if status.Code(err) == codes.Unimplemented {
		return nil
	}
	if err != nil {
		// A server of the group that does not answer keeps its failures to
		// itself; the rest of the status is still worth printing.
		_, err = fmt.Fprintf(out, "\nfailed volumes not known: %v\n", err)
		return err
	}
	if len(failed) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "FAILED VOLUME\tNAME\tSINCE\tAT\tERROR\n")
	for _, f := range failed {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", f.VolumeID, f.Name, f.Since.Format(time.RFC3339), f.Op, f.Error)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%d failed volumes refuse all I/O: a flush of their data to disk failed. Check the disk and the data, then run `vigil-datapath clear-failure VOLUME`\n", len(failed))
	return err
}
