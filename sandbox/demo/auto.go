package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/sandbox"
)

// autoRecords is how many records the writer acknowledges before the power cut.
const autoRecords = 20

// auto cuts the power of the demo pod's node and follows until the
// replacement runs on another node, the data check passed on its volume and
// the node's NodeRecovery says Recovered; an error after Config.Timeout.
func (d *demo) auto(ctx context.Context, f *follower) error {
	victim, node := f.pod, f.podNode()
	w := f.writerOf(victim.UID)
	// Two seconds of writes, so that the data check has something to check.
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := f.follow(wctx, func() bool { return f.acked(w) >= autoRecords }); err != nil {
		return err
	}
	fmt.Fprintf(d.cfg.Out, "\nvigil demo --auto: cutting the power of %s, which runs %s (its writer has acknowledged %d records)\n\n",
		node, victim.Name, f.acked(w))
	f.origin = time.Now()
	if err := d.s.Stop(node); err != nil {
		return err
	}
	f.print("cut", f.origin, "power cut of %s: %s", node, d.words.powerCut)
	f.flushAll()
	var rec *v1alpha1.NodeRecovery
	done := func() bool {
		rec = f.recovered(node)
		p := f.pod
		return w.checked && rec != nil && p != nil && p.UID != victim.UID && p.Spec.NodeName != node && f.writerOf(p.UID) != nil
	}
	tctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	if err := f.follow(tctx, done); err != nil {
		return err
	}
	if !done() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("no recovery within %s of the power cut of %s:\n%s", d.cfg.Timeout, node, f.describe(context.Background()))
	}
	fmt.Fprintf(d.cfg.Out, "\nvigil demo --auto: %s runs again on %s with all its acknowledged data, %.1fs after the power cut of %s; "+
		"NodeRecovery %s: time to recover %s. Kubernetes alone would have left it Terminating on %s for good.\n\n",
		victim.Name, f.podNode(), time.Since(f.origin).Seconds(), node, rec.Name, rec.Status.TimeToRecover, node)
	return nil
}

// recovered is the NodeRecovery of node, detected after the power cut, once
// it is Recovered or later; nil before.
func (f *follower) recovered(node string) *v1alpha1.NodeRecovery {
	for i := range f.recs {
		r := &f.recs[i]
		if r.Spec.NodeName == node && r.Status.DetectedAt != nil && !r.Status.DetectedAt.Time.Before(f.origin.Add(-time.Second)) &&
			v1alpha1.PhaseOrder(r.Status.Phase) >= v1alpha1.PhaseOrder(v1alpha1.PhaseRecovered) {
			return r
		}
	}
	return nil
}

// teardown removes the sandbox and checks that nothing of it is left.
func (d *demo) teardown() error {
	fmt.Fprintf(d.cfg.Out, "vigil demo: removing the sandbox (%s)\n", d.cfg.WorkDir)
	if err := sandbox.DownWorkDir(d.cfg.WorkDir); err != nil {
		return fmt.Errorf("remove the sandbox: %w (`%s down` tries again)", err, d.cfg.CLI)
	}
	left, err := sandbox.Leftovers(d.cfg.Name, d.cfg.WorkDir)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("the sandbox is down but left behind: %s", strings.Join(left, "; "))
	}
	fmt.Fprintf(d.cfg.Out, "vigil demo: removed; nothing is left behind (%s)\n", d.words.removed)
	return nil
}
