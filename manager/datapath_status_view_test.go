package manager

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// TestStatusOf is the specification of `datapath status`'s volumes: each
// replica of the recorded replica set (one, on the server holding the
// volume, without one), unreachable when its server does not answer or is
// no known member, else faulted when out of sync, else in sync, with the
// member epoch, and the volume's state (ok, degraded, no-quorum,
// server-down, invalid naming the problem); without a group the one server
// holds every volume.
func TestStatusOf(t *testing.T) {
	contact := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	rows := []datapath.ServerStatus{
		{ID: "datapath-0", Node: "n0", Address: "10.0.0.1:9600", Role: datapath.RoleLeader, AppliedIndex: 9},
		{ID: "datapath-1", Node: "n1", Address: "10.0.0.2:9600", Role: datapath.RoleFollower, LastContact: contact, AppliedIndex: 8},
		{ID: "datapath-2", Node: "n2", Address: "10.0.0.3:9600", Role: datapath.RoleUnreachable},
	}
	vols := []datapath.GroupVolume{
		{ID: "vol-a", Name: "pvc-a", Server: "datapath-0", Epoch: 3},
		{ID: "vol-b", Name: "pvc-b", Server: "datapath-2", Epoch: 1},
		{ID: "vol-c", Name: "pvc-c", Server: "datapath-9", Epoch: 2},
		{ID: "vol-d", Name: "pvc-d", Server: "datapath-0", Epoch: 5, MemberEpoch: 3,
			Replicas: []string{"datapath-0", "datapath-1", "datapath-2"}, InSync: []string{"datapath-0", "datapath-2"}},
		{ID: "vol-e", Name: "pvc-e", Server: "datapath-0", Epoch: 1, MemberEpoch: 1,
			Replicas: []string{"datapath-0", "datapath-1", "datapath-2"}, InSync: []string{"datapath-0", "datapath-1", "datapath-2"}},
		{ID: "vol-f", Name: "pvc-f", Server: "datapath-0", Epoch: 1, MemberEpoch: 1,
			Replicas: []string{"datapath-0", "datapath-1", "datapath-1"}, InSync: []string{"datapath-0", "datapath-1"}},
		{ID: "vol-g", Name: "pvc-g", Server: "datapath-0", Epoch: 1, MemberEpoch: 2,
			Replicas: []string{"datapath-0", "datapath-1", "datapath-9"}, InSync: []string{"datapath-0", "datapath-9"}},
	}
	nine, eight := uint64(9), uint64(8)
	for _, tc := range []struct {
		name string
		rows []datapath.ServerStatus
		vols []datapath.GroupVolume
		want statusView
	}{
		{"three servers, one unreachable", rows, vols, statusView{
			Servers: []serverView{
				{ID: "datapath-0", Node: "n0", Address: "10.0.0.1:9600", Role: "leader", AppliedIndex: &nine},
				{ID: "datapath-1", Node: "n1", Address: "10.0.0.2:9600", Role: "follower", LastContact: &contact, AppliedIndex: &eight},
				{ID: "datapath-2", Node: "n2", Address: "10.0.0.3:9600", Role: "unreachable"},
			},
			Volumes: []volumeView{
				{ID: "vol-a", Name: "pvc-a", Epoch: 3, State: "ok", Replicas: []replicaView{{Node: "n0", Server: "datapath-0", State: "in-sync"}}},
				{ID: "vol-b", Name: "pvc-b", Epoch: 1, State: "server-down", Replicas: []replicaView{{Node: "n2", Server: "datapath-2", State: "unreachable"}}},
				{ID: "vol-c", Name: "pvc-c", Epoch: 2, State: "server-down", Replicas: []replicaView{{Server: "datapath-9", State: "unreachable"}}},
				{ID: "vol-d", Name: "pvc-d", Epoch: 5, MemberEpoch: 3, State: "no-quorum", Replicas: []replicaView{
					{Node: "n0", Server: "datapath-0", State: "in-sync"},
					{Node: "n1", Server: "datapath-1", State: "faulted"},
					{Node: "n2", Server: "datapath-2", State: "unreachable"},
				}},
				{ID: "vol-e", Name: "pvc-e", Epoch: 1, MemberEpoch: 1, State: "degraded", Replicas: []replicaView{
					{Node: "n0", Server: "datapath-0", State: "in-sync"},
					{Node: "n1", Server: "datapath-1", State: "in-sync"},
					{Node: "n2", Server: "datapath-2", State: "unreachable"},
				}},
				{ID: "vol-f", Name: "pvc-f", Epoch: 1, MemberEpoch: 1, State: "invalid",
					Problem: "datapath: invalid argument: volume vol-f lists server datapath-1 twice among its replicas (datapath-0, datapath-1, datapath-1); each replica must be on its own server",
					Replicas: []replicaView{
						{Node: "n0", Server: "datapath-0", State: "in-sync"},
						{Node: "n1", Server: "datapath-1", State: "in-sync"},
						{Node: "n1", Server: "datapath-1", State: "in-sync"},
					}},
				{ID: "vol-g", Name: "pvc-g", Epoch: 1, MemberEpoch: 2, State: "no-quorum", Replicas: []replicaView{
					{Node: "n0", Server: "datapath-0", State: "in-sync"},
					{Node: "n1", Server: "datapath-1", State: "faulted"},
					{Server: "datapath-9", State: "unreachable"},
				}},
			},
		}},
		{"no group: the one server holds every volume", nil, []datapath.GroupVolume{{ID: "vol-a", Name: "pvc-a", Epoch: 4}}, statusView{
			Servers: []serverView{},
			Volumes: []volumeView{{ID: "vol-a", Name: "pvc-a", Epoch: 4, State: "ok", Replicas: []replicaView{{State: "in-sync"}}}},
		}},
		{"nothing", []datapath.ServerStatus{}, nil, statusView{Servers: []serverView{}, Volumes: []volumeView{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := statusOf(tc.rows, tc.vols); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("statusOf:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestPrintReplicas: the table has a row per replica with the volume's
// state, epoch and member epoch, says what is wrong with an invalid volume,
// and counts the volumes, replicas and volumes that are not ok.
func TestPrintReplicas(t *testing.T) {
	v := statusView{Volumes: []volumeView{
		{ID: "vol-a", Name: "pvc-a", Epoch: 3, State: "ok", Replicas: []replicaView{{Node: "n0", Server: "datapath-0", State: "in-sync"}}},
		{ID: "vol-d", Name: "pvc-d", Epoch: 5, MemberEpoch: 3, State: "no-quorum", Replicas: []replicaView{
			{Node: "n0", Server: "datapath-0", State: "in-sync"},
			{Node: "n1", Server: "datapath-1", State: "faulted"},
		}},
		{ID: "vol-f", Name: "pvc-f", Epoch: 1, MemberEpoch: 1, State: "invalid", Problem: "listed twice", Replicas: []replicaView{}},
	}}
	var out strings.Builder
	if err := printReplicas(&out, v); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := [][]string{
		{"VOLUME", "NAME", "VOLUME", "STATE", "EPOCH", "MEMBER", "EPOCH", "REPLICA", "NODE", "SERVER", "STATE"},
		{"vol-a", "pvc-a", "ok", "3", "0", "n0", "datapath-0", "in-sync"},
		{"vol-d", "pvc-d", "no-quorum", "5", "3", "n0", "datapath-0", "in-sync"},
		{"vol-d", "pvc-d", "no-quorum", "5", "3", "n1", "datapath-1", "faulted"},
		{"volume", "vol-f", "is", "invalid:", "listed", "twice"},
		{"3", "volumes", "in", "the", "control", "group,", "3", "replicas,", "1", "no-quorum,", "1", "invalid"},
	}
	if len(lines) != len(want) {
		t.Fatalf("table:\n%s", out.String())
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); !reflect.DeepEqual(got, w) {
			t.Errorf("line %d: %q; want %q", i, got, w)
		}
	}
}

// TestDatapathStatus_JSON_ServersAndVolumes: `datapath status -o json` at a
// follower of three servers lists .servers[] (each as it reports itself)
// and .volumes[] with their one replica on the leader that created them;
// once that server stops, it is unreachable and so is the volume's replica,
// and a list whose first server is the stopped one is answered by the next.
func TestDatapathStatus_JSON_ServersAndVolumes(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	v, err := srvs[0].Store.CreateVolume("pvc-a", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srvs[0].Store.Grant(v.ID, "n1"); err != nil {
		t.Fatal(err)
	}
	token := writeFile(t, "ctl", srvs[0].Token+"\n")
	status := func() statusView {
		t.Helper()
		var out strings.Builder
		app := DatapathApp()
		app.Writer = &out
		if err := app.Run([]string{DatapathBinary, "status", "-o", "json", "--addr", srvs[1].Addr, "--token-file", token, "--timeout", "5s"}); err != nil {
			t.Fatalf("datapath status -o json: %v\n%s", err, out.String())
		}
		var view statusView
		if err := json.Unmarshal([]byte(out.String()), &view); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out.String())
		}
		return view
	}
	var view statusView
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		view = status()
		if (len(view.Volumes) == 1 && view.Volumes[0].Epoch == 1) || time.Now().After(deadline) { // the follower applies the grant
			break
		}
	}
	if len(view.Servers) != 3 || view.Servers[0].Role != "leader" || view.Servers[1].Role != "follower" || view.Servers[0].Address != srvs[0].Addr {
		t.Fatalf("servers: %+v", view.Servers)
	}
	want := []volumeView{{ID: v.ID, Name: "pvc-a", Epoch: 1, State: "ok", Replicas: []replicaView{{Server: "datapath-0", State: "in-sync"}}}}
	if !strings.Contains(rawStatus(t, srvs[1].Addr, token), `"memberEpoch": 0`) {
		t.Error("the JSON has no memberEpoch")
	}
	if !reflect.DeepEqual(view.Volumes, want) {
		t.Fatalf("volumes: %+v; want %+v", view.Volumes, want)
	}
	srvs[0].Stop()
	view = status()
	var out strings.Builder
	app := DatapathApp()
	app.Writer = &out
	list := srvs[0].Addr + "," + srvs[1].Addr // the first does not answer: the next is asked
	if err := app.Run([]string{DatapathBinary, "status", "-o", "json", "--addr", list, "--token-file", token, "--timeout", "5s"}); err != nil {
		t.Fatalf("datapath status -o json, the first server of the list stopped: %v\n%s", err, out.String())
	}
	if view.Servers[0].Role != "unreachable" || view.Servers[0].AppliedIndex != nil || len(view.Volumes) != 1 || view.Volumes[0].Replicas[0].State != "unreachable" ||
		view.Volumes[0].State != "server-down" {
		t.Fatalf("with the holder stopped: %+v", view)
	}
}

// rawStatus is `datapath status -o json` at addr as printed.
func rawStatus(t *testing.T, addr, token string) string {
	t.Helper()
	var out strings.Builder
	app := DatapathApp()
	app.Writer = &out
	if err := app.Run([]string{DatapathBinary, "status", "-o", "json", "--addr", addr, "--token-file", token, "--timeout", "5s"}); err != nil {
		t.Fatalf("datapath status -o json: %v\n%s", err, out.String())
	}
	return out.String()
}
