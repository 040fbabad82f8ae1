package controller

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vigil-storage/vigil"
)

// nodes of the outage table: "name zone state", state one of
//
//	ready     Ready, Lease fresh, engine heartbeating
//	cut       not Ready, engine heartbeating (a kubelet cut off from the API server)
//	stale     Ready, Lease stale, engine heartbeating (cut off, not yet Unknown)
//	dead      not Ready, engine silent (a power cut)
//	isolated  Ready, engine silent (cut off from the datapath only)
//	fresh     not Ready but Lease fresh, engine heartbeating
func outageNodes(specs ...string) []outageNode {
	var out []outageNode
	for _, s := range specs {
		f := strings.Fields(s)
		name, zone, state := f[0], f[1], f[2]
		if zone == "-" {
			zone = ""
		}
		n := outageNode{Name: name, Zone: zone}
		switch state {
		case "ready":
			n.Ready, n.Heartbeating = true, true
		case "cut":
			n.LeaseStale, n.Heartbeating = true, true
		case "stale":
			n.Ready, n.LeaseStale, n.Heartbeating = true, true, true
		case "dead":
			n.LeaseStale = true
		case "isolated":
			n.Ready = true
		case "fresh":
			n.Heartbeating = true
		default:
			panic("unknown state " + state)
		}
		out = append(out, n)
	}
	return out
}

// repeat is n nodes named prefix-1… in zone with state.
func repeat(prefix, zone, state string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d %s %s", prefix, i+1, zone, state)
	}
	return out
}

func concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func heldNames(d outageDecision) []string {
	out := []string{}
	for n := range d.Held {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// TestDecideOutage_Table is the specification of the control-plane outage
// rule.
func TestDecideOutage_Table(t *testing.T) {
	tests := []struct {
		name   string
		nodes  []string
		pct    int
		held   []string
		scopes []string // "cluster" or the zone ("-" for the unlabelled nodes)
	}{
		{name: "all ready: nothing", nodes: repeat("n", "-", "ready", 3), pct: 55, held: []string{}},
		{name: "one zombie of three is fenced as such", nodes: concat(repeat("z", "-", "cut", 1), repeat("r", "-", "ready", 2)),
			pct: 55, held: []string{}},
		{name: "two of three cut off: fewer than three, a Ready node left", nodes: concat(repeat("c", "-", "cut", 2), repeat("r", "-", "ready", 1)),
			pct: 55, held: []string{}},
		{name: "every node of three cut off: held", nodes: repeat("c", "-", "cut", 3), pct: 55,
			held: []string{"c-1", "c-2", "c-3"}, scopes: []string{"cluster", "-"}},
		{name: "two of two cut off: no Ready node in the cluster", nodes: repeat("c", "-", "cut", 2), pct: 55,
			held: []string{"c-1", "c-2"}, scopes: []string{"cluster"}},
		{name: "a one-node cluster cut off is held", nodes: repeat("c", "-", "cut", 1), pct: 55,
			held: []string{"c-1"}, scopes: []string{"cluster"}},
		{name: "six of ten: 60% at or over 55%", nodes: concat(repeat("c", "-", "cut", 6), repeat("r", "-", "ready", 4)), pct: 55,
			held: []string{"c-1", "c-2", "c-3", "c-4", "c-5", "c-6"}, scopes: []string{"cluster", "-"}},
		{name: "five of ten: 50% below 55%", nodes: concat(repeat("c", "-", "cut", 5), repeat("r", "-", "ready", 5)), pct: 55,
			held: []string{}},
		{name: "eleven of twenty: exactly 55%", nodes: concat(repeat("c", "-", "cut", 11), repeat("r", "-", "ready", 9)), pct: 55,
			held: []string{"c-1", "c-10", "c-11", "c-2", "c-3", "c-4", "c-5", "c-6", "c-7", "c-8", "c-9"}, scopes: []string{"cluster", "-"}},
		{name: "the threshold is the setting: five of ten at 50%", nodes: concat(repeat("c", "-", "cut", 5), repeat("r", "-", "ready", 5)), pct: 50,
			held: []string{"c-1", "c-2", "c-3", "c-4", "c-5"}, scopes: []string{"cluster", "-"}},
		{name: "threshold 100: all but one is not enough", nodes: concat(repeat("c", "-", "cut", 9), repeat("r", "-", "ready", 1)), pct: 100,
			held: []string{}},
		{name: "a zone lost among three: that zone only", pct: 55,
			nodes: concat(repeat("a", "zone-a", "cut", 3), repeat("b", "zone-b", "ready", 3), repeat("c", "zone-c", "ready", 3)),
			held:  []string{"a-1", "a-2", "a-3"}, scopes: []string{"zone-a"}},
		{name: "a zone at 3 of 5 (60%) while the cluster is at 3 of 15", pct: 55,
			nodes: concat(repeat("a", "zone-a", "cut", 3), repeat("ar", "zone-a", "ready", 2), repeat("b", "zone-b", "ready", 10)),
			held:  []string{"a-1", "a-2", "a-3"}, scopes: []string{"zone-a"}},
		{name: "two zombies in one zone, one in another: no scope qualifies", pct: 55,
			nodes: concat(repeat("a", "zone-a", "cut", 2), repeat("ar", "zone-a", "ready", 1), repeat("b", "zone-b", "cut", 1), repeat("br", "zone-b", "ready", 2)),
			held:  []string{}},
		{name: "one node per zone, one zombie: fenced, a one-node zone proves nothing", pct: 55,
			nodes: concat(repeat("a", "zone-a", "cut", 1), repeat("b", "zone-b", "ready", 1), repeat("c", "zone-c", "ready", 1)),
			held:  []string{}},
		{name: "no Ready node in a zone of three (two heartbeat, one dead): held", pct: 55,
			nodes: concat(repeat("a", "zone-a", "cut", 2), repeat("ad", "zone-a", "dead", 1), repeat("b", "zone-b", "ready", 3)),
			held:  []string{"a-1", "a-2"}, scopes: []string{"zone-a"}},
		{name: "unlabelled nodes are one zone of their own", pct: 55,
			nodes: concat(repeat("u", "-", "cut", 3), repeat("b", "zone-b", "ready", 5)),
			held:  []string{"u-1", "u-2", "u-3"}, scopes: []string{"-"}},
		{name: "dead nodes are no evidence: three of three silent", nodes: repeat("d", "-", "dead", 3), pct: 55, held: []string{}},
		{name: "dead nodes count in the total, not as evidence", pct: 55,
			nodes: concat(repeat("c", "-", "cut", 3), repeat("d", "-", "dead", 3), repeat("r", "-", "ready", 2)),
			held:  []string{}},
		{name: "storage-isolated nodes are excluded and never held", pct: 55,
			nodes: concat(repeat("c", "-", "cut", 3), repeat("i", "-", "isolated", 2)),
			held:  []string{"c-1", "c-2", "c-3"}, scopes: []string{"cluster", "-"}},
		{name: "the whole cluster silent at the datapath: nothing held", pct: 55,
			nodes: concat(repeat("d", "-", "dead", 2), repeat("i", "-", "isolated", 2)), held: []string{}},
		{name: "stale Leases count before Kubernetes calls the nodes down", nodes: repeat("s", "-", "stale", 3), pct: 55,
			held: []string{"s-1", "s-2", "s-3"}, scopes: []string{"cluster", "-"}},
		{name: "stale Leases mixed with Unknown nodes", nodes: concat(repeat("s", "-", "stale", 2), repeat("c", "-", "cut", 1), repeat("r", "-", "ready", 1)),
			pct: 55, held: []string{"c-1", "s-1", "s-2"}, scopes: []string{"cluster", "-"}},
		{name: "fresh Leases on not-Ready nodes still count as cut off", nodes: repeat("f", "-", "fresh", 3), pct: 55,
			held: []string{"f-1", "f-2", "f-3"}, scopes: []string{"cluster", "-"}},
		{name: "one stale Lease among Ready nodes: nothing", nodes: concat(repeat("s", "-", "stale", 1), repeat("r", "-", "ready", 4)),
			pct: 55, held: []string{}},
		{name: "no nodes", pct: 55, held: []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := decideOutage(outageNodes(tc.nodes...), nil, tc.pct, t0)
			if got := heldNames(d); !reflect.DeepEqual(got, tc.held) {
				t.Errorf("held %v, want %v", got, tc.held)
			}
			var scopes []string
			for _, s := range d.Scopes {
				switch {
				case s.Cluster:
					scopes = append(scopes, "cluster")
				case s.Zone == "":
					scopes = append(scopes, "-")
				default:
					scopes = append(scopes, s.Zone)
				}
			}
			if !reflect.DeepEqual(scopes, tc.scopes) {
				t.Errorf("scopes %v, want %v", scopes, tc.scopes)
			}
			for _, h := range d.Held {
				if !h.ScopeEndedAt.IsZero() {
					t.Errorf("a hold in a qualifying scope has an end %v", h.ScopeEndedAt)
				}
			}
		})
	}
}

// TestDecideOutage_SettleAfterTheScopeEnds: when the control plane comes back,
// nodes report one by one; those not back yet stay held for outageSettle, and
// no longer.
func TestDecideOutage_SettleAfterTheScopeEnds(t *testing.T) {
	all := outageNodes(repeat("c", "-", "cut", 3)...)
	d := decideOutage(all, nil, 55, t0)
	if len(d.Held) != 3 {
		t.Fatalf("held %v, want all three", heldNames(d))
	}
	// c-1 is back: two left, a Ready node; the scope no longer qualifies.
	partly := outageNodes("c-1 - ready", "c-2 - cut", "c-3 - cut")
	d = decideOutage(partly, d.Held, 55, t0.Add(time.Second))
	if got := heldNames(d); !reflect.DeepEqual(got, []string{"c-2", "c-3"}) || len(d.Scopes) != 0 {
		t.Fatalf("held %v scopes %v, want c-2 and c-3 settling and no scope", got, d.Scopes)
	}
	if end := d.Held["c-2"].ScopeEndedAt; !end.Equal(t0.Add(time.Second)) {
		t.Fatalf("scope end %v, want %v", end, t0.Add(time.Second))
	}
	// Within the settle nothing changes, and the end is not moved.
	d = decideOutage(partly, d.Held, 55, t0.Add(outageSettle))
	if got := heldNames(d); !reflect.DeepEqual(got, []string{"c-2", "c-3"}) || !d.Held["c-3"].ScopeEndedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("held %v (%+v) within the settle", got, d.Held)
	}
	// c-2 is back, c-3 goes silent at the datapath: released at once (the
	// storage-isolation rule takes it).
	d2 := decideOutage(outageNodes("c-1 - ready", "c-2 - ready", "c-3 - dead"), d.Held, 55, t0.Add(2*time.Second))
	if len(d2.Held) != 0 {
		t.Fatalf("held %v, want none: back, or silent", heldNames(d2))
	}
	// After the settle, a node still cut off is judged by Kubernetes' verdict.
	d = decideOutage(partly, d.Held, 55, t0.Add(time.Second+outageSettle))
	if len(d.Held) != 0 {
		t.Fatalf("held %v after the settle, want none", heldNames(d))
	}
	// A node never held is not held by the settle.
	d = decideOutage(partly, map[string]outageHold{"c-9": {}}, 55, t0)
	if len(d.Held) != 0 {
		t.Fatalf("held %v, want none", heldNames(d))
	}
	// The scope qualifies again: the end is cleared.
	d = decideOutage(all, map[string]outageHold{"c-1": {ScopeEndedAt: t0}}, 55, t0.Add(time.Second))
	if d.Held["c-1"].ScopeEndedAt != (time.Time{}) {
		t.Fatalf("hold %+v, want no end while the scope qualifies", d.Held["c-1"])
	}
}

// A pod on a node held in an outage is never reaped, whatever the trigger:
// terminating past its deadline, or down past the grace and proven fenced.
func TestDecide_NodeHeldInOutageIsNeverReaped(t *testing.T) {
	objs := []runtime.Object{newNode("node-1", corev1.ConditionUnknown, -time.Minute),
		newPVC("app", "data", "pv-1", nil), newPV("pv-1", vigil.DriverName)}
	for _, fast := range []bool{false, true} {
		set := defaultSet()
		set.FastFencedTrigger = fast
		pod := terminating(stsPod(pvcVolume("data", "data")), -time.Hour)
		s := namedSnapshotSeen(pod, set, func(string) bool { return true }, time.Hour, objs...)
		if d := decide(s, set, t0); d.Kind != DecisionDelete {
			t.Fatalf("fast=%t: without the hold %s/%s, want a delete (the test would prove nothing)", fast, d.Kind, d.Reason)
		}
		s.NodeObserved.Fenced = false // a node held was never fenced by Vigil
		s.NodeObserved.OutageHeld = true
		d := decide(s, set, t0)
		if d.Kind != DecisionSkip || d.Reason != ReasonOutageHeld || len(d.Actions) != 0 || d.Node.State != NodeHeldControlPlaneOutage {
			t.Errorf("fast=%t: %+v, want skip %s with no action", fast, d, ReasonOutageHeld)
		}
	}
}

func TestTransformForCache_NodeKeepsItsZoneLeaseItsRenewal(t *testing.T) {
	n := newNode("node-1", corev1.ConditionTrue, -time.Hour)
	n.Labels = map[string]string{corev1.LabelTopologyZone: "zone-a", corev1.LabelHostname: "node-1", "team": "x"}
	slim, _ := TransformForCache(n)
	if got := slim.(*corev1.Node).Labels; !reflect.DeepEqual(got, map[string]string{corev1.LabelTopologyZone: "zone-a"}) {
		t.Errorf("labels %v, want the zone only", got)
	}
	renew, dur := metav1.NewMicroTime(t0), int32(40)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Namespace: corev1.NamespaceNodeLease,
		Labels: map[string]string{"a": "b"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptrTo("node-1"), RenewTime: &renew, LeaseDurationSeconds: &dur}}
	once, _ := TransformForCache(l)
	twice, _ := TransformForCache(once)
	if !reflect.DeepEqual(once, twice) {
		t.Fatalf("not idempotent: %#v %#v", once, twice)
	}
	sl := once.(*coordinationv1.Lease)
	if sl.Labels != nil || sl.ManagedFields != nil || sl.Spec.HolderIdentity != nil ||
		!sl.Spec.RenewTime.Equal(&renew) || *sl.Spec.LeaseDurationSeconds != 40 || sl.Name != "node-1" {
		t.Errorf("slim lease %#v", sl)
	}
}

func ptrTo[T any](v T) *T { return &v }
