package fencebackend

import (
	"testing"
	"time"

	"github.com/vigil-storage/vigil/fenceapi"
)

// TestMergeReports is the specification of how the reports of several
// datapath servers make one: a node is as silent as the server that heard
// it last says (each server's times on its own clock), leaving when any
// server says so, and a server absent from the list (it did not answer)
// counts for nothing.
func TestMergeReports(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	skew := time.Hour // server B's clock is an hour ahead of A's
	a := func(nodes ...fenceapi.NodeConnectivity) fenceapi.Report {
		return fenceapi.Report{Now: t0, Since: t0.Add(-10 * time.Minute), Nodes: nodes}
	}
	b := func(nodes ...fenceapi.NodeConnectivity) fenceapi.Report {
		return fenceapi.Report{Now: t0.Add(skew), Since: t0.Add(skew - 30*time.Minute), Nodes: nodes}
	}
	restarted := func(nodes ...fenceapi.NodeConnectivity) fenceapi.Report {
		return fenceapi.Report{Now: t0, Since: t0.Add(-3 * time.Second), Nodes: nodes}
	}
	beat := func(node string, at time.Time) fenceapi.NodeConnectivity {
		return fenceapi.NodeConnectivity{Node: node, LastHeartbeat: at}
	}
	leave := func(node string, last, until time.Time) fenceapi.NodeConnectivity {
		return fenceapi.NodeConnectivity{Node: node, LastHeartbeat: last, LeavingUntil: until}
	}
	const leaving = time.Duration(-1) // Silence says the node is not to be judged
	for _, tc := range []struct {
		name    string
		reports []fenceapi.Report
		want    map[string]time.Duration // node -> silence; absent: not listed
		since   time.Duration            // the merged report's time since its start
	}{
		{"one server", []fenceapi.Report{a(beat("n1", t0.Add(-5*time.Second)))},
			map[string]time.Duration{"n1": 5 * time.Second}, 10 * time.Minute},
		{"silent at one server, heard at another", []fenceapi.Report{
			a(beat("n1", t0.Add(-time.Minute))), b(beat("n1", t0.Add(skew-time.Second)))},
			map[string]time.Duration{"n1": time.Second}, 30 * time.Minute},
		{"heard at the first, silent at the other", []fenceapi.Report{
			a(beat("n1", t0.Add(-2*time.Second))), b(beat("n1", t0.Add(skew-time.Hour)))},
			map[string]time.Duration{"n1": 2 * time.Second}, 30 * time.Minute},
		{"silent at every server", []fenceapi.Report{
			a(beat("n1", t0.Add(-40*time.Second))), b(beat("n1", t0.Add(skew-50*time.Second)))},
			map[string]time.Duration{"n1": 40 * time.Second}, 30 * time.Minute},
		{"a node only one server lists", []fenceapi.Report{
			a(beat("n1", t0.Add(-time.Second))), b(beat("n2", t0.Add(skew-7*time.Second)))},
			map[string]time.Duration{"n1": time.Second, "n2": 7 * time.Second}, 30 * time.Minute},
		{"never heard since a restart counts from the restart", []fenceapi.Report{
			restarted(beat("n1", time.Time{})), b(beat("n1", t0.Add(skew-time.Minute)))},
			map[string]time.Duration{"n1": 3 * time.Second}, 30 * time.Minute},
		{"leaving at one server, silent at the other", []fenceapi.Report{
			a(leave("n1", t0.Add(-time.Minute), t0.Add(time.Minute))), b(beat("n1", t0.Add(skew-time.Minute)))},
			map[string]time.Duration{"n1": leaving}, 30 * time.Minute},
		{"a stop that ran out counts as the last word", []fenceapi.Report{
			a(leave("n1", t0.Add(-time.Minute), t0.Add(-4*time.Second))), b(beat("n1", t0.Add(skew-time.Minute)))},
			map[string]time.Duration{"n1": 4 * time.Second}, 30 * time.Minute},
		{"the servers that did not answer are absent: the one that did speaks", []fenceapi.Report{
			b(beat("n1", t0.Add(skew-time.Second)), beat("n2", t0.Add(skew-20*time.Second)))},
			map[string]time.Duration{"n1": time.Second, "n2": 20 * time.Second}, 30 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeReports(tc.reports)
			if len(got.Nodes) != len(tc.want) {
				t.Fatalf("nodes %+v; want %d", got.Nodes, len(tc.want))
			}
			if s := got.Now.Sub(got.Since); s != tc.since {
				t.Errorf("since the start: %s; want %s", s, tc.since)
			}
			for node, want := range tc.want {
				d, ok := got.Silence(node)
				switch {
				case want == leaving && ok:
					t.Errorf("%s: silent %s; want leaving (not judged)", node, d)
				case want != leaving && (!ok || d != want):
					t.Errorf("%s: silent %s (judged %v); want %s", node, d, ok, want)
				}
			}
		})
	}
}
