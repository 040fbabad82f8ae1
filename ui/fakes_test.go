package ui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/httpapi"
	"github.com/vigil-storage/vigil/settings"
)

const testToken = "ui-test-token"

type fixture struct {
	set *settings.Settings
	srv *httptest.Server
	ui  *UI
}

func newFixture(t testing.TB, managed map[string]string, tokenForReads bool) *fixture {
	t.Helper()
	dir := ""
	if len(managed) > 0 {
		dir = t.TempDir()
		for name, v := range managed {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	store := settings.NewMemoryStore()
	s, err := settings.New(store, dir, settings.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	set := s
	api, err := httpapi.New(httpapi.Config{Settings: set, Token: testToken, TokenForReads: tokenForReads,
		Nodes: fakeNodes{}, Recoveries: fakeRecoveries{}})
	if err != nil {
		t.Fatal(err)
	}
	u, err := New(Config{API: api, Now: func() time.Time { return t0.Add(90 * time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	api.Register(mux)
	u.Register(mux)
	srv := httptest.NewServer(httpapi.Secure(mux))
	t.Cleanup(func() { srv.Close(); _ = s.Close(); _ = store.Close() })
	return &fixture{set: set, srv: srv, ui: u}
}

var t0 = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)

type fakeNodes struct{}

func (fakeNodes) Nodes(context.Context) (httpapi.NodesReport, error) {
	since, fenced := t0, t0.Add(400*time.Millisecond)
	hb, silent := 0.8, 90.0
	contact := t0.Add(89 * time.Second)
	return httpapi.NodesReport{Verdicts: httpapi.VerdictsController, Datapath: httpapi.DatapathConnected, Nodes: []httpapi.NodeView{
		{Name: "node-a", Verdict: httpapi.VerdictDown, Reason: "ready-unknown", Since: &since, HeartbeatAgeSeconds: &silent,
			Fenced: true, FencedAt: &fenced, Tainted: true,
			Volumes:        []httpapi.VolumeGrant{{Handle: "vol-1", PV: "pv-db-0", Epoch: 8, State: "fenced"}},
			DatapathServer: &httpapi.DatapathServer{ID: "dp-a", Address: "10.0.0.1:9600", Role: httpapi.ServerUnreachable}},
		{Name: "node-b", Verdict: httpapi.VerdictUp, Since: &since, HeartbeatAgeSeconds: &hb,
			Volumes:        []httpapi.VolumeGrant{{Handle: "vol-1", PV: "pv-db-0", Epoch: 8, State: "granted"}},
			DatapathServer: &httpapi.DatapathServer{ID: "dp-b", Address: "10.0.0.2:9600", Role: httpapi.ServerLeader}},
		{Name: "node-c", Verdict: httpapi.VerdictLeaving, Reason: "graceful stop announced", Leaving: true, Volumes: []httpapi.VolumeGrant{},
			DatapathServer: &httpapi.DatapathServer{ID: "dp-c", Address: "10.0.0.3:9600", Role: httpapi.ServerFollower, LastContact: &contact}},
		{Name: "node-d", Verdict: httpapi.VerdictUp, Since: &since, HeartbeatAgeSeconds: &hb, Volumes: []httpapi.VolumeGrant{}},
	}}, nil
}

type fakeRecoveries struct{}

func at(sec float64) metav1.MicroTime {
	return metav1.NewMicroTime(t0.Add(time.Duration(sec * float64(time.Second))))
}
func atp(sec float64) *metav1.MicroTime {
	t := at(sec)
	return &t
}

func sampleRecovery() v1alpha1.NodeRecovery {
	secs := 4.21
	return v1alpha1.NodeRecovery{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a-20260102-030000"},
		Spec:       v1alpha1.NodeRecoverySpec{NodeName: "node-a"},
		Status: v1alpha1.NodeRecoveryStatus{
			Phase: v1alpha1.PhaseNodeReturned, Reason: "ready-unknown", DetectedAt: atp(0), FencedAt: atp(0.35), TaintedAt: atp(0.4),
			Volumes:      []v1alpha1.FencedVolume{{Handle: "vol-1", PVName: "pv-db-0", Epoch: 8, FencedAt: at(0.35)}},
			Pods:         []v1alpha1.ReapedPod{{Namespace: "db", Name: "pg-0", Owner: "StatefulSet/pg", ReapedAt: at(2.2)}},
			Attachments:  []v1alpha1.FreedAttachment{{Name: "csi-0a1b", PVName: "pv-db-0", Action: "deleted", FreedAt: at(2.3)}},
			Replacements: []v1alpha1.Replacement{{Namespace: "db", Name: "pg-0", NodeName: "node-b", RunningAt: atp(4.21)}},
			RecoveredAt:  atp(4.21), RecoverySeconds: &secs, TimeToRecover: "4.21s",
			Return: &v1alpha1.NodeReturn{ReadyAt: atp(70), UntaintedAt: atp(71.2)},
		},
	}
}

func (fakeRecoveries) Recoveries(context.Context) ([]v1alpha1.NodeRecovery, error) {
	return []v1alpha1.NodeRecovery{sampleRecovery()}, nil
}

func (fakeRecoveries) Recovery(_ context.Context, name string) (*v1alpha1.NodeRecovery, error) {
	r := sampleRecovery()
	if name != r.Name {
		return nil, httpapi.ErrNotFound
	}
	return &r, nil
}
