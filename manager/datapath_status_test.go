package manager

import (
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

func TestPrintNodes_AgesOnTheServersClock(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	r := datapath.NodesReport{Now: now, Started: now.Add(-90 * time.Second), Nodes: []datapath.NodeStatus{
		{Node: "node-a", LastHeartbeat: now.Add(-1200 * time.Millisecond), LastIO: now.Add(-50 * time.Millisecond), LiveGrants: 3},
		{Node: "node-b", LeavingUntil: now.Add(45 * time.Second), LastHeartbeat: now.Add(-2 * time.Minute)},
		{Node: "node-c", LeavingUntil: now.Add(-5 * time.Second), LiveGrants: 1},
	}}
	var out strings.Builder
	if err := printNodes(&out, r); err != nil {
		t.Fatal(err)
	}
	want := `NODE    LAST HEARTBEAT    LAST I/O          LEAVING         LIVE GRANTS
node-a  1.2s ago          100ms ago         -               3
node-b  2m0s ago          none since start  for 45s         0
node-c  none since start  none since start  ran out 5s ago  1
3 nodes; the datapath started 1m30s ago (2025-03-01T11:58:30Z); it knows nothing of heartbeats or I/O before that
`
	if out.String() != want {
		t.Fatalf("printNodes =\n%s\nwant\n%s", out.String(), want)
	}
}
