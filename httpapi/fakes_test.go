package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/settings"
)

// historyLen is how many changes the settings' store recorded.
func historyLen(t testing.TB, s *settings.Settings) int {
	t.Helper()
	h, err := s.History(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return len(h)
}

// newSettings returns live settings on a memory store; managed maps setting
// names to overlay file contents.
func newSettings(t testing.TB, managed map[string]string) *settings.Settings {
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
	t.Cleanup(func() { _ = s.Close(); _ = store.Close() })
	return s
}

const testToken = "s3cret-token"

type fixture struct {
	api *API
	set *settings.Settings
	srv *httptest.Server
}

func newFixture(t testing.TB, managed map[string]string, mod func(*Config)) *fixture {
	t.Helper()
	set := newSettings(t, managed)
	cfg := Config{Settings: set, Token: testToken, Nodes: fakeNodes{}, Recoveries: fakeRecoveries{}}
	if mod != nil {
		mod(&cfg)
	}
	api, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	api.Register(mux)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { api.Run(ctx); close(done) }()
	srv := httptest.NewServer(Secure(mux))
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return &fixture{api: api, set: set, srv: srv}
}

type fakeNodes struct{ err error }

var heartbeat = 1.5

func (f fakeNodes) Nodes(context.Context) (NodesReport, error) {
	if f.err != nil {
		return NodesReport{}, f.err
	}
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return NodesReport{Verdicts: VerdictsController, Datapath: DatapathConnected, Nodes: []NodeView{
		{Name: "node-a", Verdict: VerdictDown, Reason: "ready-unknown", Since: &since, Fenced: true, FencedAt: &since, Tainted: true,
			Volumes: []VolumeGrant{{Handle: "vol-1", PV: "pv-1", Epoch: 7, State: "fenced"}}},
		{Name: "node-b", Verdict: VerdictUp, HeartbeatAgeSeconds: &heartbeat, Volumes: []VolumeGrant{}},
	}}, nil
}

type fakeRecoveries struct{ err error }

var t0 = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)

func at(sec float64) metav1.MicroTime {
	return metav1.NewMicroTime(t0.Add(time.Duration(sec * float64(time.Second))))
}
func atp(sec float64) *metav1.MicroTime {
	t := at(sec)
	return &t
}

// sampleRecovery is a complete recovery of node-a.
func sampleRecovery() v1alpha1.NodeRecovery {
	secs := 4.2
	return v1alpha1.NodeRecovery{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a-1"},
		Spec:       v1alpha1.NodeRecoverySpec{NodeName: "node-a"},
		Status: v1alpha1.NodeRecoveryStatus{
			Phase: v1alpha1.PhaseNodeReturned, Reason: "ready-unknown", DetectedAt: atp(0), FencedAt: atp(0.4), TaintedAt: atp(0.5),
			Volumes:      []v1alpha1.FencedVolume{{Handle: "vol-1", Epoch: 8, FencedAt: at(0.4)}},
			Pods:         []v1alpha1.ReapedPod{{Namespace: "db", Name: "pg-0", ReapedAt: at(2.1)}, {Namespace: "db", Name: "pg-1", ReapedAt: at(2.3)}},
			Attachments:  []v1alpha1.FreedAttachment{{Name: "csi-1", Action: "deleted", FreedAt: at(2.0)}},
			Replacements: []v1alpha1.Replacement{{Namespace: "db", Name: "pg-0", RunningAt: atp(4.2)}},
			RecoveredAt:  atp(4.2), RecoverySeconds: &secs, TimeToRecover: "4.2s",
			Return: &v1alpha1.NodeReturn{ReadyAt: atp(60), UntaintedAt: atp(61.5)},
		},
	}
}

func (f fakeRecoveries) Recoveries(context.Context) ([]v1alpha1.NodeRecovery, error) {
	if f.err != nil {
		return nil, f.err
	}
	return []v1alpha1.NodeRecovery{sampleRecovery()}, nil
}

func (f fakeRecoveries) Recovery(_ context.Context, name string) (*v1alpha1.NodeRecovery, error) {
	if f.err != nil {
		return nil, f.err
	}
	r := sampleRecovery()
	if name != r.Name {
		return nil, fmt.Errorf("noderecovery %s: %w", name, ErrNotFound)
	}
	return &r, nil
}
