package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// A change of a volume whose data another server of the group holds takes
// effect only once that server applied it: it serves the volume's I/O from
// the table it applied. So Grant, Fence, Release, DeleteVolume and FenceNode
// tell the leader that this client confirms (wire.ConfirmMetadataKey); the
// leader commits the change and answers with the log entry and the servers
// that hold the touched volumes' data; the client asks each of them to
// confirm that it applied the entry (WaitApplied) and reports the change
// done only once, for each touched volume, its server did - of a volume
// with R replicas, a majority of them (datapath.WriteQuorum(R)), so a fence
// is on every majority a write's acknowledgement needs. Too few servers
// confirming within the bound (WithApplyWait) make the call fail with
// datapath.ErrNotApplied naming those that did not: the change is
// committed but not done.

// DefaultApplyWait bounds how long a change waits for the servers that hold
// its volumes' data to confirm that they applied it.
const DefaultApplyWait = 5 * time.Second

// WithApplyWait sets how long a change waits for the servers that hold the
// touched volumes' data to confirm that they applied it (default
// DefaultApplyWait, at most datapath.MaxWaitApplied).
func WithApplyWait(d time.Duration) Option { return func(o *options) { o.applyWait = d } }

// confirming marks a change's context: the server answers with the servers
// that must apply it.
func confirming(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, wire.ConfirmMetadataKey, "1")
}

// unconfirmed is one server that did not confirm a change: its volumes and
// why.
type unconfirmed struct {
	holder wire.PendingHolder
	err    error
}

// confirm asks every server of p to confirm that it applied p's entry, at
// once, and returns those that did not, each with the volumes that lack
// their majority: a change is done for a volume once WriteQuorum of the
// servers p lists with it confirmed (its one server, or a majority of its
// replicas, all of which the leader lists). It stops waiting once every
// volume has its majority.
func (c *Client) confirm(ctx context.Context, p *wire.Pending) []unconfirmed {
	return c.confirmWith(ctx, p, false)
}

// confirmEvery is confirm for a change every server of p must apply (a
// create: each replica opens its data file as it applies it).
func (c *Client) confirmEvery(ctx context.Context, p *wire.Pending) []unconfirmed {
	return c.confirmWith(ctx, p, true)
}

func (c *Client) confirmWith(ctx context.Context, p *wire.Pending, every bool) []unconfirmed {
	if p.Empty() {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	need := map[string]int{} // volume -> confirmations still missing
	for _, h := range p.Holders {
		for _, v := range h.Volumes {
			need[v]++
		}
	}
	if !every {
		for v, r := range need {
			need[v] = datapath.WriteQuorum(r)
		}
	}
	answers := make(chan unconfirmed, len(p.Holders)) // each server's answer, err nil when it confirmed
	for _, h := range p.Holders {
		go func() { answers <- unconfirmed{h, c.waitApplied(ctx, h.Address, p.Index, p.Term)} }()
	}
	var failed []unconfirmed
	for range p.Holders {
		a := <-answers
		if a.err != nil {
			failed = append(failed, a)
			continue
		}
		for _, v := range a.holder.Volumes {
			need[v]--
		}
		if lacking(need) == 0 {
			break // every volume has its majority: the others need not answer
		}
	}
	var out []unconfirmed
	for _, a := range failed {
		var vols []string
		for _, v := range a.holder.Volumes {
			if need[v] > 0 {
				vols = append(vols, v)
			}
		}
		if len(vols) > 0 {
			a.holder.Volumes = vols
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].holder.ID < out[j].holder.ID })
	return out
}

// lacking counts the volumes still short of their confirmations.
func lacking(need map[string]int) int {
	n := 0
	for _, k := range need {
		if k > 0 {
			n++
		}
	}
	return n
}

// waitApplied asks the server at addr, until the bound, to answer once it
// applied the entry; a server that cannot be reached is asked again after
// a pause.
func (c *Client) waitApplied(ctx context.Context, addr string, index, term uint64) error {
	wait := c.opts.applyWait
	if wait <= 0 {
		wait = DefaultApplyWait
	}
	wait = min(wait, datapath.MaxWaitApplied)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if addr == "" {
		return fmt.Errorf("the group records no datapath address for it")
	}
	conn, err := c.connAt(addr)
	if err != nil {
		return err
	}
	backoff := c.opts.minBackoff
	for {
		left := time.Until(deadlineOf(ctx))
		if left <= 0 {
			return fmt.Errorf("not confirmed within %s: %w", wait, context.DeadlineExceeded)
		}
		// The server answers a little before the bound, saying how far it got.
		req := &wire.WaitAppliedRequest{Index: index, Term: term, TimeoutNanos: int64(left - left/10)}
		err = conn.Invoke(ctx, wire.FullMethod(wire.MethodWaitApplied), req, &wire.Empty{})
		if err == nil {
			return nil
		}
		err = datapath.FromStatus(err)
		var re *datapath.RemoteError
		if (errors.As(err, &re) && re.Sentinel != nil) || status.Code(err) != codes.Unavailable {
			return err // the server's answer, or the bound
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("not confirmed within %s (last error: %w)", wait, err)
		case <-t.C:
		}
		backoff = min(backoff*2, c.opts.maxBackoff)
	}
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// notApplied is the error of a change some server did not confirm.
func notApplied(what string, us []unconfirmed) error {
	errs := make([]error, 0, len(us))
	for _, u := range us {
		errs = append(errs, fmt.Errorf("%s: %w, %s at %s (volumes %s): %v; the volumes' I/O is served by that server (of a replicated volume, by its replicas, "+
			"fewer than a majority of which confirmed), which may still take a fenced node's writes until it applies the change; call again once it is back",
			what, datapath.ErrNotApplied, u.holder.ID, u.holder.Address, volumeList(u.holder.Volumes), u.err))
	}
	return errors.Join(errs...)
}

func volumeList(vs []string) string {
	const show = 5
	if len(vs) > show {
		return fmt.Sprintf("%s and %d more", strings.Join(vs[:show], ", "), len(vs)-show)
	}
	return strings.Join(vs, ", ")
}

// WaitApplied asks the server this client dialed to answer once it applied
// the control group's log entry at index of term (or a later one), waiting
// at most the client's apply bound (WithApplyWait); the controller identity
// only. Grant, Fence, Release, DeleteVolume and FenceNode call it on the
// servers that hold their volumes' data by themselves.
func (c *Client) WaitApplied(ctx context.Context, index, term uint64) error {
	return c.waitApplied(ctx, c.addr, index, term)
}
