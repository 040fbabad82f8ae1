package csi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hungVolumes is a datapath whose capacity query never answers.
type hungVolumes struct{ *fakeVolumes }

func (hungVolumes) Capacity(ctx context.Context) (int64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func probeGet(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz/csi", nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

// TestProbeHandler_Answers is the specification of the liveness endpoint: 200
// when the CSI server on the socket answers Probe ready, 503 with the reason
// when it is not ready, does not answer in time, or is not there.
func TestProbeHandler_Answers(t *testing.T) {
	failing := newFakeVolumes()
	failing.failWith = errors.New("connection refused")
	for _, tc := range []struct {
		name     string
		server   *Server // nil: nothing listens on the socket
		timeout  time.Duration
		code     int
		contains []string
	}{
		{"controller, datapath answers", NewServer(newFakeVolumes(), WithLogger(discardLogger())), time.Second, http.StatusOK, []string{"ok"}},
		{"node service only", NewServer(nil, WithLogger(discardLogger())), time.Second, http.StatusOK, []string{"ok"}},
		{"controller, datapath refuses", NewServer(failing, WithLogger(discardLogger())), time.Second, http.StatusServiceUnavailable,
			[]string{"CSI Probe on ", "csi.sock", "not ready", "datapath did not answer"}},
		{"controller, datapath hangs", NewServer(hungVolumes{newFakeVolumes()}, WithLogger(discardLogger())), time.Second,
			http.StatusServiceUnavailable, []string{"CSI Probe on ", "DeadlineExceeded"}},
		{"no CSI server", nil, time.Second, http.StatusServiceUnavailable, []string{"CSI Probe on ", "csi.sock", "Unavailable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(shortTempDir(t), "csi.sock")
			if tc.server != nil {
				path = strings.TrimPrefix(serve(t, tc.server), "unix://")
			}
			code, body := probeGet(t, ProbeHandler(path, tc.timeout))
			if code != tc.code {
				t.Errorf("HTTP %d, want %d; body %q", code, tc.code, body)
			}
			for _, want := range tc.contains {
				if !strings.Contains(body, want) {
					t.Errorf("body %q does not say %q", body, want)
				}
			}
		})
	}
}

// TestProbeHandler_ServerStops: once the CSI server stops (its socket
// removed), the same handler answers 503.
func TestProbeHandler_ServerStops(t *testing.T) {
	srv := NewServer(newFakeVolumes(), WithLogger(discardLogger()), WithStopTimeout(time.Second))
	path := strings.TrimPrefix(serve(t, srv), "unix://")
	h := ProbeHandler(path, time.Second)
	if code, body := probeGet(t, h); code != http.StatusOK {
		t.Fatalf("serving: HTTP %d %q, want 200", code, body)
	}
	srv.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := probeGet(t, h)
		if code == http.StatusServiceUnavailable && strings.Contains(body, path) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stopped: HTTP %d %q, want 503 naming %s", code, body, path)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
