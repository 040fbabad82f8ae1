package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFailingIO(t *testing.T) {
	back := at(100)
	tests := []struct {
		name   string
		states []ioState
		want   []string // substrings, one per violation, in order
	}{
		{"every pod wrote after its node was back", []ioState{
			{Claim: "data-db-0", Pod: "db-0", Node: "node-1", LastAck: at(101)},
			{Claim: "keep-data-3", Pod: "keep-0", Node: "node-2", LastAck: at(130)},
		}, nil},
		{"a pod whose last write is from before the return is stranded", []ioState{
			{Claim: "data-db-1", Pod: "db-1", Node: "node-2", LastAck: at(90), LastErr: "record 9: fsync /x: input/output error"},
			{Claim: "data-db-0", Pod: "db-0", Node: "node-1", LastAck: at(101)},
		}, []string{"pod db-1 (claim data-db-1) on node-2 is left with failing I/O: no write acknowledged since its node was back at " +
			back.Format("15:04:05.000") + " (last acknowledged: " + at(90).Format("15:04:05.000") + "); its writer's last error: record 9: fsync /x: input/output error"}},
		{"a write exactly at the return does not count", []ioState{{Claim: "c", Pod: "p", Node: "n", LastAck: back}},
			[]string{"pod p (claim c) on n is left with failing I/O"}},
		{"a pod that never wrote", []ioState{{Claim: "c", Pod: "p", Node: "n"}},
			[]string{"(last acknowledged: none)"}},
		{"a claim without a running pod", []ioState{{Claim: "app-data"}},
			[]string{"claim app-data: no running pod writes it since its node was back"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := failingIO(tc.states, back)
			if len(got) != len(tc.want) {
				t.Fatalf("failingIO = %q, want %d violations like %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("violation %d = %q, want it to contain %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestLastWriterError(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "writer-u.log")
	body := "writer u: record 3: open /t/records-u: volume not mounted (not acknowledged; reopening every 500ms)\n" +
		"writer u: writing again at record 7\n" +
		"writer u: record 12: fsync /t/records-u: input/output error (not acknowledged; reopening every 500ms)\n" +
		"writer u: still failing\n"
	if err := os.WriteFile(log, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := lastWriterError(log); !strings.HasPrefix(got, "writer u: record 12: fsync") {
		t.Errorf("lastWriterError = %q, want the record 12 failure", got)
	}
	if got := lastWriterError(filepath.Join(dir, "none.log")); got != "" {
		t.Errorf("lastWriterError(missing) = %q, want none", got)
	}
}

func TestTriggerRE(t *testing.T) {
	msg := "node node-2 is ready; policy delete-both-statefulset-and-deployment-pod; trigger fenced-node-returned; relying on: every volume …"
	if m := triggerRE.FindStringSubmatch(msg); m == nil || m[1] != "fenced-node-returned" {
		t.Errorf("trigger of %q = %v", msg, m)
	}
}
