package chaos

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// setSetting finds the API in the manager's serving line (as run_cmd.go
// prints it), sends the token the manager generated, PUTs a value and
// DELETEs (resets) for "".
func TestManager_SetSetting(t *testing.T) {
	type call struct{ method, path, auth, body string }
	var calls []call
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls = append(calls, call{r.Method, r.URL.Path, r.Header.Get("Authorization"), string(b)})
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"error":"refused"}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	m := newManager("manager-a", nil, dir)
	m.n = 1
	line := "stdout: vigil-manager: serving the UI, /v1/, /metrics, /healthz, /readyz on " + srv.URL + "\n"
	if err := os.WriteFile(m.current(), []byte("I1128 leaderelection\n"+line), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "api-token"), []byte("tok123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.setSetting(ctx, state, "node-down-grace-period", "10s"); err != nil {
		t.Fatal(err)
	}
	if err := m.setSetting(ctx, state, "node-down-grace-period", ""); err != nil {
		t.Fatal(err)
	}
	want := []call{{http.MethodPut, "/v1/settings/node-down-grace-period", "Bearer tok123", `{"value": "10s"}`},
		{http.MethodDelete, "/v1/settings/node-down-grace-period", "Bearer tok123", ""}}
	if len(calls) != 2 || calls[0] != want[0] || calls[1] != want[1] {
		t.Fatalf("calls = %+v, want %+v", calls, want)
	}
	status = http.StatusBadRequest
	if err := m.setSetting(ctx, state, "node-down-grace-period", "ten"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("a refused value = %v, want the API's answer in the error", err)
	}
	if err := os.WriteFile(m.current(), []byte("no serving line yet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.setSetting(ctx, state, "node-down-grace-period", "10s"); err == nil || !strings.Contains(err.Error(), "no serving line") {
		t.Errorf("without a serving line = %v, want it said", err)
	}
}
