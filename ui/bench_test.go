package ui

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/httpapi"
	"github.com/vigil-storage/vigil/settings"
)

// BenchmarkUI_SettingsPage is the server side of the settings page: the whole
// page rendered from the live settings (one managed, with history), through the
// handler and the security wrapper, into a recorder. It reports the p50 and p99
// of one render (the goal is p99 ≤ 5 ms). Run with:
//
//	go test -run '^$' -bench BenchmarkUI_SettingsPage -benchtime 2000x ./ui
func BenchmarkUI_SettingsPage(b *testing.B) {
	f := newFixture(b, map[string]string{settings.NameCrashLoopRestartLimit: "7"}, false)
	for _, v := range []string{"1s", "2s", "3s"} {
		_ = f.set.SetAs(b.Context(), settings.NameNodeDownGracePeriod, v, httpapi.Actor{Source: "cli"})
	}
	mux := http.NewServeMux()
	f.ui.Register(mux)
	h := httpapi.Secure(mux)
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		lat = append(lat, time.Since(t0))
		if rec.Code != http.StatusOK {
			b.Fatalf("GET / = %d", rec.Code)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
}
