package manager

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/controller"
	"github.com/vigil-storage/vigil/fenceapi"
	"github.com/vigil-storage/vigil/httpapi"
)

var reportNow = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// readyAt is when the test nodes' Ready condition last changed.
var readyAt = metav1.NewTime(reportNow.Add(-time.Hour))

func testNode(name string, ready corev1.ConditionStatus, taints ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastTransitionTime: readyAt}}
	}
	for _, k := range taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoSchedule})
	}
	return n
}

func byNodeName(rep httpapi.NodesReport) map[string]httpapi.NodeView {
	out := map[string]httpapi.NodeView{}
	for _, v := range rep.Nodes {
		out[v.Name] = v
	}
	return out
}

func before(d time.Duration) time.Time { return reportNow.Add(-d) }

func hbAge(v httpapi.NodeView) string {
	if v.HeartbeatAgeSeconds == nil {
		return "none"
	}
	return (time.Duration(*v.HeartbeatAgeSeconds * float64(time.Second))).String()
}

func volumes(v httpapi.NodeView) string {
	var out []string
	for _, g := range v.Volumes {
		out = append(out, g.Handle+"("+g.PV+")@"+strconv.FormatUint(g.Epoch, 10)+":"+g.State)
	}
	return strings.Join(out, ",")
}

// Without controllers' verdicts (a standby) and without a datapath, the view is
// the Node objects': their Ready condition, taints and cordons, and notes that
// say why nothing more is shown.
func TestNodesReport_StandbyWithoutDatapath_NodeObjectsOnly(t *testing.T) {
	cordoned := testNode("n-cordoned", corev1.ConditionTrue)
	cordoned.Spec.Unschedulable = true
	rep := nodesReport(nodesInput{Nodes: []*corev1.Node{
		testNode("n-ready", corev1.ConditionTrue), testNode("n-false", corev1.ConditionFalse),
		testNode("n-unknown", corev1.ConditionUnknown, vigil.FencedTaintKey),
		testNode("n-oos", corev1.ConditionUnknown, vigil.OutOfServiceTaintKey), testNode("n-none", ""), cordoned,
	}, Statuses: []controller.NodeStatus{{Name: "n-false", State: controller.NodeDownNotReady, Down: true}}}, reportNow)
	if rep.Verdicts != httpapi.VerdictsKubernetes || rep.Datapath != httpapi.DatapathNone ||
		len(rep.Notes) != 2 || rep.Notes[0] != noteStandby || rep.Notes[1] != noteNoDatapath {
		t.Fatalf("report %+v", rep)
	}
	want := map[string]struct {
		verdict, reason string
		tainted         bool
	}{
		"n-ready":    {httpapi.VerdictReady, "Ready=True", false},
		"n-false":    {httpapi.VerdictNotReady, "Ready=False", false}, // a standby's statuses are not verdicts
		"n-unknown":  {httpapi.VerdictUnknown, "Ready=Unknown", true},
		"n-oos":      {httpapi.VerdictUnknown, "Ready=Unknown, out-of-service", false},
		"n-none":     {httpapi.VerdictUnknown, "no Ready condition", false},
		"n-cordoned": {httpapi.VerdictReady, "Ready=True", false},
	}
	got := byNodeName(rep)
	if len(got) != len(want) || rep.Nodes[0].Name != "n-cordoned" {
		t.Fatalf("nodes %+v", rep.Nodes)
	}
	for name, w := range want {
		v := got[name]
		if v.Verdict != w.verdict || v.Reason != w.reason || v.Tainted != w.tainted || v.Volumes == nil ||
			v.HeartbeatAgeSeconds != nil || v.Fenced {
			t.Errorf("%s: %+v, want %s %q tainted=%t", name, v, w.verdict, w.reason, w.tainted)
		}
	}
	if v := got["n-ready"]; v.Since == nil || !v.Since.Equal(readyAt.Time) {
		t.Errorf("since %v, want the Ready condition's last transition", v.Since)
	}
	if !got["n-cordoned"].Unschedulable || got["n-ready"].Unschedulable {
		t.Error("cordon not shown")
	}
}

// The leader's view: the controllers' verdicts, the datapath's heartbeats on
// the manager's clock, graceful stops, and each node's rows: live grants
// always, fenced rows only while the failure lasts, released rows never.
func TestNodesReport_Leader_VerdictsHeartbeatsAndGrants(t *testing.T) {
	in := nodesInput{
		Leading: true,
		Nodes: []*corev1.Node{
			testNode("node-1", corev1.ConditionUnknown, vigil.FencedTaintKey), testNode("node-2", corev1.ConditionTrue),
			testNode("node-3", corev1.ConditionTrue), testNode("node-4", corev1.ConditionFalse),
			testNode("node-5", corev1.ConditionTrue), testNode("node-7", corev1.ConditionTrue),
		},
		Statuses: []controller.NodeStatus{
			{Name: "node-1", State: controller.NodeDownUnknown, Down: true, Since: before(12 * time.Second), NotReadySince: before(12 * time.Second), FencedAt: before(11 * time.Second)},
			{Name: "node-4", State: controller.NodeNotReadyDebouncing, NotReadySince: before(3 * time.Second)},
			{Name: "node-6", State: controller.NodeDownDeleted, Down: true, Since: before(time.Minute), FencedAt: before(59 * time.Second)},
			{Name: "node-8", State: controller.NodeStorageIsolated, SilentSince: before(20 * time.Second)},
		},
		Storage: &storagePoll{At: reportNow.Add(-500 * time.Millisecond),
			Conn: map[string]nodeLink{
				"node-1": {LastBeat: before(12 * time.Second)}, "node-2": {LastBeat: before(700 * time.Millisecond)},
				"node-3": {LastBeat: before(2 * time.Second), Leaving: true}, "node-7": {},
			},
			Grants: map[string][]fenceapi.Grant{
				"node-1": {{Handle: "vol-a", Epoch: 8, State: fenceapi.StateFenced}, {Handle: "vol-old", Epoch: 3, State: fenceapi.StateReleased}},
				"node-2": {{Handle: "vol-a", Epoch: 9, State: fenceapi.StateGranted}},
				"node-5": {{Handle: "vol-b", Epoch: 4, State: fenceapi.StateFenced}, {Handle: "vol-c", Epoch: 2, State: fenceapi.StateGranted}},
			}},
		PVs: map[string]string{"vol-a": "pv-a", "vol-c": "pv-c"},
	}
	rep := nodesReport(in, reportNow)
	if rep.Verdicts != httpapi.VerdictsController || rep.Datapath != httpapi.DatapathConnected || len(rep.Notes) != 0 {
		t.Fatalf("report %+v", rep)
	}
	got := byNodeName(rep)
	cases := []struct {
		name, verdict, reason string
		since                 time.Time
		age, volumes          string
		fenced, tainted       bool
	}{
		{"node-1", httpapi.VerdictDown, "ready-unknown", before(12 * time.Second), "12s", "vol-a(pv-a)@8:fenced", true, true},
		{"node-2", httpapi.VerdictUp, "Ready=True", readyAt.Time, "700ms", "vol-a(pv-a)@9:granted", false, false},
		{"node-3", httpapi.VerdictLeaving, "graceful stop announced", readyAt.Time, "2s", "", false, false},
		{"node-4", httpapi.VerdictSuspect, "not-ready-within-debounce", before(3 * time.Second), "none", "", false, false},
		{"node-5", httpapi.VerdictUp, "Ready=True", readyAt.Time, "none", "vol-c(pv-c)@2:granted", false, false}, // vol-b: a past failure
		{"node-6", httpapi.VerdictDown, "deleted", before(time.Minute), "none", "", true, false},
		{"node-7", httpapi.VerdictUp, "Ready=True", readyAt.Time, "none", "", false, false}, // silent since the datapath started
		{"node-8", httpapi.VerdictSuspect, "storage-isolated-unfenced", before(20 * time.Second), "none", "", false, false},
	}
	if len(got) != len(cases) {
		t.Fatalf("%d nodes, want %d: %+v", len(got), len(cases), rep.Nodes)
	}
	for _, c := range cases {
		v := got[c.name]
		since := time.Time{}
		if v.Since != nil {
			since = *v.Since
		}
		if v.Verdict != c.verdict || v.Reason != c.reason || !since.Equal(c.since) || hbAge(v) != c.age ||
			volumes(v) != c.volumes || v.Fenced != c.fenced || v.Tainted != c.tainted {
			t.Errorf("%s: verdict %s (%s) since %v age %s volumes %q fenced %t tainted %t;\n want %s (%s) since %v age %s volumes %q fenced %t tainted %t",
				c.name, v.Verdict, v.Reason, since, hbAge(v), volumes(v), v.Fenced, v.Tainted,
				c.verdict, c.reason, c.since, c.age, c.volumes, c.fenced, c.tainted)
		}
	}
	if v := got["node-1"]; v.FencedAt == nil || !v.FencedAt.Equal(before(11*time.Second)) {
		t.Errorf("node-1 fenced at %v", v.FencedAt)
	}
	if !got["node-3"].Leaving || got["node-2"].Leaving {
		t.Error("leaving not shown")
	}
}

// A standby sees the datapath too: a tainted node with fenced rows is shown
// fenced (it has not cleaned up), without the controllers' time.
func TestNodesReport_Standby_FencedFromTheDatapath(t *testing.T) {
	rep := nodesReport(nodesInput{
		Nodes: []*corev1.Node{testNode("node-1", corev1.ConditionUnknown, vigil.FencedTaintKey), testNode("node-2", corev1.ConditionTrue)},
		Storage: &storagePoll{At: reportNow, Conn: map[string]nodeLink{}, Grants: map[string][]fenceapi.Grant{
			"node-1": {{Handle: "vol-a", Epoch: 8, State: fenceapi.StateFenced}},
			"node-2": {{Handle: "vol-b", Epoch: 8, State: fenceapi.StateFenced}}, // not tainted: a past failure
		}},
	}, reportNow)
	got := byNodeName(rep)
	if v := got["node-1"]; !v.Fenced || v.FencedAt != nil || volumes(v) != "vol-a()@8:fenced" {
		t.Errorf("node-1 %+v", v)
	}
	if v := got["node-2"]; v.Fenced || len(v.Volumes) != 0 {
		t.Errorf("node-2 %+v", v)
	}
	if rep.Datapath != httpapi.DatapathConnected || len(rep.Notes) != 1 || rep.Notes[0] != noteStandby {
		t.Errorf("report %+v", rep)
	}
}

// A failed poll shows no storage columns, and says why and when.
func TestNodesReport_DatapathUnavailable_SaysWhy(t *testing.T) {
	rep := nodesReport(nodesInput{Leading: true, Nodes: []*corev1.Node{testNode("node-1", corev1.ConditionTrue)},
		Storage: &storagePoll{At: reportNow, Err: errors.New("connection refused")}}, reportNow)
	if rep.Datapath != httpapi.DatapathUnavailable || len(rep.Notes) != 1 ||
		!strings.Contains(rep.Notes[0], "connection refused") || !strings.Contains(rep.Notes[0], "12:00:00Z") {
		t.Fatalf("report %+v", rep)
	}
	if v := rep.Nodes[0]; v.HeartbeatAgeSeconds != nil || v.Verdict != httpapi.VerdictUp {
		t.Errorf("node %+v", v)
	}
}

// Heartbeats are on the datapath's clock; the view moves them onto the
// manager's, so a skew between the two clocks does not change an age.
func TestLinkOf_MovesTimesOntoTheManagersClock(t *testing.T) {
	dpNow := reportNow.Add(time.Hour) // the datapath's clock is an hour ahead
	links := linkOf(fenceapi.Report{Now: dpNow, Since: dpNow.Add(-time.Minute), Nodes: []fenceapi.NodeConnectivity{
		{Node: "a", LastHeartbeat: dpNow.Add(-1500 * time.Millisecond)},
		{Node: "b", LastHeartbeat: dpNow.Add(-time.Second), LeavingUntil: dpNow.Add(30 * time.Second)},
		{Node: "c", LeavingUntil: dpNow.Add(-time.Second)},
	}}, reportNow)
	if a := links["a"]; !a.LastBeat.Equal(reportNow.Add(-1500*time.Millisecond)) || a.Leaving {
		t.Errorf("a = %+v", a)
	}
	if b := links["b"]; !b.Leaving {
		t.Errorf("b = %+v, want leaving", b)
	}
	if c := links["c"]; !c.LastBeat.IsZero() || c.Leaving {
		t.Errorf("c = %+v, want no heartbeat and a stop that ran out", c)
	}
}

func TestPVsByHandle_OnlyVigilsDriver(t *testing.T) {
	pv := func(name, driver, handle string) *corev1.PersistentVolume {
		p := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if driver != "" {
			p.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}
		}
		return p
	}
	got := pvsByHandle([]*corev1.PersistentVolume{pv("pv-a", vigil.DriverName, "vol-a"), pv("pv-b", "ebs.csi.aws.com", "vol-b"), pv("pv-c", "", "")})
	if len(got) != 1 || got["vol-a"] != "pv-a" {
		t.Fatalf("%v", got)
	}
}

// BenchmarkNodesReport_500Nodes is one GET /v1/nodes of a large cluster's
// view: 500 nodes, 40 volumes each, 20 of them down and fenced. Run with:
//
//	go test -run '^$' -bench BenchmarkNodesReport_500Nodes ./manager
func BenchmarkNodesReport_500Nodes(b *testing.B) {
	in := nodesInput{Leading: true, PVs: map[string]string{},
		Storage: &storagePoll{At: reportNow, Conn: map[string]nodeLink{}, Grants: map[string][]fenceapi.Grant{}}}
	for i := range 500 {
		name := "node-" + strconv.Itoa(i)
		ready := corev1.ConditionTrue
		if i%25 == 0 {
			ready = corev1.ConditionUnknown
			in.Statuses = append(in.Statuses, controller.NodeStatus{Name: name, State: controller.NodeDownUnknown, Down: true,
				Since: before(10 * time.Second), FencedAt: before(9 * time.Second)})
		}
		in.Nodes = append(in.Nodes, testNode(name, ready))
		in.Storage.Conn[name] = nodeLink{LastBeat: before(time.Duration(i) * time.Millisecond)}
		for v := range 40 {
			h := name + "-vol-" + strconv.Itoa(v)
			in.PVs[h] = "pv-" + h
			st := fenceapi.StateGranted
			if ready != corev1.ConditionTrue {
				st = fenceapi.StateFenced
			}
			in.Storage.Grants[name] = append(in.Storage.Grants[name], fenceapi.Grant{Handle: h, Epoch: uint64(v + 1), State: st})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if rep := nodesReport(in, reportNow); len(rep.Nodes) != 500 {
			b.Fatalf("%d nodes", len(rep.Nodes))
		}
	}
}

// Each node that runs a datapath server of the group shows it: its id,
// address and role (leader, follower, or unreachable when it did not answer
// the manager), a follower's last contact with the leader; a node without
// one shows none, and so does every node without a datapath.
func TestNodesReport_DatapathServers(t *testing.T) {
	contact := before(300 * time.Millisecond)
	servers := []fenceapi.Server{
		{ID: "s1", Node: "n1", Address: "10.0.0.1:9600", Role: fenceapi.RoleLeader},
		{ID: "s2", Node: "n2", Address: "10.0.0.2:9600", Role: fenceapi.RoleFollower, LastContact: contact},
		{ID: "s3", Node: "n3", Address: "10.0.0.3:9600", Role: fenceapi.RoleUnreachable},
		{ID: "s9", Node: "gone", Address: "10.0.0.9:9600", Role: fenceapi.RoleFollower},
	}
	nodes := []*corev1.Node{testNode("n1", corev1.ConditionTrue), testNode("n2", corev1.ConditionTrue),
		testNode("n3", corev1.ConditionUnknown), testNode("n4", corev1.ConditionTrue)}
	rep := nodesReport(nodesInput{Nodes: nodes, Leading: true, Storage: &storagePoll{At: reportNow, Servers: servers}}, reportNow)
	got := byNodeName(rep)
	for name, want := range map[string]*httpapi.DatapathServer{
		"n1": {ID: "s1", Address: "10.0.0.1:9600", Role: "leader"},
		"n2": {ID: "s2", Address: "10.0.0.2:9600", Role: "follower", LastContact: &contact},
		"n3": {ID: "s3", Address: "10.0.0.3:9600", Role: "unreachable"},
		"n4": nil,
	} {
		s := got[name].DatapathServer
		switch {
		case want == nil && s != nil:
			t.Errorf("%s: server %+v; want none", name, *s)
		case want != nil && (s == nil || s.ID != want.ID || s.Address != want.Address || s.Role != want.Role ||
			(s.LastContact == nil) != (want.LastContact == nil) || s.LastContact != nil && !s.LastContact.Equal(*want.LastContact)):
			t.Errorf("%s: server %+v; want %+v", name, s, want)
		}
	}
	if _, ok := got["gone"]; ok {
		t.Errorf("a server on a node that is neither a Node nor judged added a row: %+v", got["gone"])
	}
	rep = nodesReport(nodesInput{Nodes: nodes, Leading: true, Storage: &storagePoll{At: reportNow, Err: errors.New("refused")}}, reportNow)
	for _, v := range rep.Nodes {
		if v.DatapathServer != nil {
			t.Errorf("%s: server %+v from a datapath that could not be read", v.Name, *v.DatapathServer)
		}
	}
}
