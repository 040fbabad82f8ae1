package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
)

// groupRows is the control group as `datapath status` shows it: each
// member's row as that member reports itself (asked at its datapath
// address), or unreachable when it does not answer.
func groupRows(ctx context.Context, c *cli.Context, dp *client.Client, addr string) ([]datapath.ServerStatus, error) {
	rep, err := dp.Servers(ctx)
	if status.Code(err) == codes.Unimplemented {
		return nil, nil // a server of the release before the control group
	}
	if err != nil {
		return nil, err
	}
	rows := make([]datapath.ServerStatus, 0, len(rep.Servers))
	for _, m := range rep.Servers {
		if !m.Self && m.Address != "" && m.Address != addr {
			m = askServer(ctx, c, m)
		}
		rows = append(rows, m)
	}
	return rows, nil
}

// askServer returns member m's own row, asked at its datapath address, or m
// marked unreachable.
func askServer(ctx context.Context, c *cli.Context, m datapath.ServerStatus) datapath.ServerStatus {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	other, err := dialDatapath(ctx, c, "", m.Address, client.WithTimeout(2*time.Second), client.WithRetries(0))
	if err == nil {
		defer other.Close()
		var rep datapath.ServersReport
		if rep, err = other.Servers(ctx); err == nil {
			for _, s := range rep.Servers {
				if s.Self && s.ID == m.ID {
					return s
				}
			}
		}
	}
	m.Role, m.LastContact, m.AppliedIndex = datapath.RoleUnreachable, time.Time{}, 0
	return m
}

// printServers prints the control group's table of `datapath status`.
func printServers(out io.Writer, rows []datapath.ServerStatus) error {
	if rows == nil {
		_, err := fmt.Fprintln(out, "this datapath keeps no control group (a release before the group)")
		return err
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "SERVER\tNODE\tADDRESS\tROLE\tLAST CONTACT\tAPPLIED INDEX\n")
	for _, s := range rows {
		contact, applied := "-", "-"
		if s.Role != datapath.RoleUnreachable && s.Role != datapath.RoleLeader && !s.LastContact.IsZero() {
			contact = s.LastContact.UTC().Format(time.RFC3339Nano)
		}
		if s.Role != datapath.RoleUnreachable {
			applied = fmt.Sprint(s.AppliedIndex)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, dash(s.Node), dash(s.Address), dash(s.Role), contact, applied)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "%d servers in the control group\n", len(rows))
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// dialAnswering dials the first server of d's list that answers, the others
// given as the group's servers, so that `datapath status` during an outage
// of the first server asks another (a server too old to report the group
// counts as answering).
func dialAnswering(ctx context.Context, d datapathDial, timeout time.Duration) (*client.Client, datapathDial, error) {
	var errs []error
	for i := range d.addrs {
		first := d
		first.addr = d.addrs[i]
		first.addrs = append([]string{d.addrs[i]}, append(append([]string{}, d.addrs[:i]...), d.addrs[i+1:]...)...)
		dp, err := first.dial(ctx, client.WithTimeout(timeout))
		if err != nil {
			return nil, d, err
		}
		if len(d.addrs) == 1 {
			return dp, first, nil
		}
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = dp.Servers(actx)
		cancel()
		if err == nil || status.Code(err) == codes.Unimplemented {
			return dp, first, nil
		}
		_ = dp.Close()
		errs = append(errs, fmt.Errorf("%s: %w", first.addr, err))
	}
	return nil, d, fmt.Errorf("no datapath server of %s answered: %w", strings.Join(d.addrs, ","), errors.Join(errs...))
}
