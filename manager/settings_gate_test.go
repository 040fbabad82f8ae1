package manager

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/vigil-storage/vigil"
)

// fakeGate is a settingsGate whose answer the test sets.
type fakeGate struct {
	mu      sync.Mutex
	err     error
	changed chan struct{}
}

func newFakeGate(err error) *fakeGate { return &fakeGate{err: err, changed: make(chan struct{})} }

func (g *fakeGate) ActBlocked() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

func (g *fakeGate) ProblemsChanged() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

func (g *fakeGate) set(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.err = err
	close(g.changed)
	g.changed = make(chan struct{})
}

const gateTimeout = 15 * time.Second

func nextEvent(t *testing.T, rec *record.FakeRecorder) string {
	t.Helper()
	select {
	case e := <-rec.Events:
		return e
	case <-time.After(gateTimeout):
		t.Fatalf("no Event within %s", gateTimeout)
	}
	return ""
}

func TestReportActBlocked_EventPerChange(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gate := newFakeGate(errors.New("not acting: overlay file /etc/vigil/dry-run refused: " + strings.Repeat("x", 2000)))
	rec := record.NewFakeRecorder(10)
	done := make(chan struct{})
	go func() { defer close(done); reportActBlocked(ctx, gate, rec, &corev1.ObjectReference{Kind: "Lease"}) }()
	e := nextEvent(t, rec)
	if !strings.HasPrefix(e, "Warning "+vigil.EventReasonSettingsBlocked+" not acting: overlay file /etc/vigil/dry-run") || len(e) > 1100 {
		t.Fatalf("first Event %.200q (%d bytes), want a Warning naming the file, at most ~1 KB", e, len(e))
	}
	gate.set(errors.New("not acting: overlay file /etc/vigil/dry-run refused: other"))
	if e := nextEvent(t, rec); !strings.Contains(e, "refused: other") {
		t.Fatalf("Event after the reason changed: %q", e)
	}
	gate.set(nil)
	if e := nextEvent(t, rec); !strings.HasPrefix(e, "Normal "+vigil.EventReasonSettingsUnblocked) {
		t.Fatalf("Event after the fix: %q", e)
	}
	gate.set(nil) // no change: no Event
	cancel()
	<-done
	select {
	case e := <-rec.Events:
		t.Fatalf("an Event without a change: %q", e)
	default:
	}
}

func (f *fakeAPIServer) objectsUnder(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for path, body := range f.objects {
		if strings.HasPrefix(path, prefix) {
			out = append(out, string(body))
		}
	}
	return out
}

// TestRun_BadManagedValueAtStartupBlocksUntilFixed: vigil-manager run started
// with a managed dry-run that has a typo is not ready (/readyz names the file and
// the value), records a Warning Event on its Lease, and becomes ready once the
// file is fixed.
func TestRun_BadManagedValueAtStartupBlocksUntilFixed(t *testing.T) {
	api := &fakeAPIServer{objects: map[string][]byte{
		"/api/v1/namespaces/vigil-system": []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"vigil-system"}}`),
	}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	overlay := filepath.Join(dir, "overlay")
	if err := os.Mkdir(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(overlay, "dry-run")
	writeTestFile(t, file, "ture")
	args := []string{"run", "--kubeconfig", writeKubeconfig(t, srv.URL), "--listen", "127.0.0.1:0",
		"--settings-store", "bolt:" + filepath.Join(dir, "settings.db"), "--settings-dir", overlay,
		"--leader-elect-lease-namespace", "vigil-system"}
	base := startManager(t, args)

	deadline := time.Now().Add(20 * time.Second)
	var events []string
	for {
		events = api.objectsUnder("/api/v1/namespaces/vigil-system/events/")
		if len(events) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(events) != 1 || !strings.Contains(events[0], vigil.EventReasonSettingsBlocked) ||
		!strings.Contains(events[0], `"kind":"Lease"`) || !strings.Contains(events[0], file) {
		t.Fatalf("Events %v, want one %s on the Lease naming %s", events, vigil.EventReasonSettingsBlocked, file)
	}
	// Not ready, whatever else: the settings block is reported before the
	// informers' sync.
	code, body := getBody(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, file) || !strings.Contains(body, `"ture"`) {
		t.Fatalf("/readyz = %d %q, want 503 naming %s and the value", code, body, file)
	}
	// Still not ready once synced and leading: the controllers do not act
	// until the fix.
	const leasePath = "/apis/coordination.k8s.io/v1/namespaces/vigil-system/leases/vigil-manager"
	for !strings.Contains(api.object(leasePath), `"holderIdentity":"`) {
		if time.Now().After(deadline) {
			t.Fatal("never took the Lease")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := getBody(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, file) {
		t.Fatalf("/readyz while leading = %d %q, want 503 naming %s", code, body, file)
	}
	writeTestFile(t, file, "true")
	for code != http.StatusOK {
		if time.Now().After(deadline.Add(20 * time.Second)) {
			t.Fatalf("/readyz still %d %q after the fix", code, body)
		}
		time.Sleep(50 * time.Millisecond)
		code, body = getBody(t, base+"/readyz")
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startManager runs `vigil-manager ARGS` as a child process (TestRun_Child),
// killed at the end of the test, and returns the base URL it serves.
func startManager(t *testing.T, args []string) string {
	t.Helper()
	_, base, _ := startRunChild(t, args)
	return base
}
