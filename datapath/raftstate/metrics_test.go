package raftstate

import (
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// TestServerCounts is the specification of vigil_datapath_servers{state}
// as one server sees the group.
func TestServerCounts(t *testing.T) {
	for _, tc := range []struct {
		name                string
		leads, knowsLeader  bool
		voters, unreachable int
		want                map[string]int
	}{
		{"lone leader", true, true, 1, 0, map[string]int{StateLeader: 1, StateFollower: 0, StateUnreachable: 0}},
		{"leader of three, one silent", true, true, 3, 1, map[string]int{StateLeader: 1, StateFollower: 1, StateUnreachable: 1}},
		{"follower of three", false, true, 3, 0, map[string]int{StateLeader: 1, StateFollower: 2, StateUnreachable: 0}},
		{"cut off, no leader", false, false, 3, 0, map[string]int{StateLeader: 0, StateFollower: 1, StateUnreachable: 2}},
	} {
		if got := serverCounts(tc.leads, tc.knowsLeader, tc.voters, tc.unreachable); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestGroup_Metrics_LeaderChangesServersAndCommits: on three servers, a
// fence is observed in the commit histogram; after the leader's kill, a
// survivor counts the change of leader, and the new leader sees the killed
// server as unreachable.
func TestGroup_Metrics_LeaderChangesServersAndCommits(t *testing.T) {
	metrics := []*Metrics{NewMetrics(prometheus.NewRegistry()), NewMetrics(prometheus.NewRegistry()), NewMetrics(prometheus.NewRegistry())}
	c := newTestClusterWith(t, 3, metrics)
	v := createAndGrant(t, c)
	first := c.waitLeader(time.Second)
	fence(t, c, v.ID, "n1", 1)
	if n := testutil.CollectAndCount(metrics[first].commitSeconds); n != 1 {
		t.Fatalf("commit histogram collected %d series", n)
	}
	if h := histogramCount(t, metrics[first].commitSeconds); h < 3 {
		t.Fatalf("the leader observed %d commits; want the create, the grant and the fence at least", h)
	}
	before := make([]float64, 3)
	for i, m := range metrics {
		before[i] = testutil.ToFloat64(m.leaderChanges)
	}
	c.kill(first)
	next := c.waitLeader(3 * time.Second)
	// The counter is moved by the goroutine that watches the leadership,
	// which may run a moment after the new leader is seen.
	after := testutil.ToFloat64(metrics[next].leaderChanges)
	for deadline := time.Now().Add(3 * time.Second); after == before[next] && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		after = testutil.ToFloat64(metrics[next].leaderChanges)
	}
	if after != before[next]+1 {
		t.Fatalf("leader changes seen by the new leader: %v -> %v; want one more", before[next], after)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		c.group(next).UpdateMetrics()
		m := metrics[next].servers
		got := map[string]float64{StateLeader: testutil.ToFloat64(m.WithLabelValues(StateLeader)),
			StateFollower: testutil.ToFloat64(m.WithLabelValues(StateFollower)), StateUnreachable: testutil.ToFloat64(m.WithLabelValues(StateUnreachable))}
		if reflect.DeepEqual(got, map[string]float64{StateLeader: 1, StateFollower: 1, StateUnreachable: 1}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("servers as the new leader sees them: %v; want 1 leader, 1 follower, 1 unreachable", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	h.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
