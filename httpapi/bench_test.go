package httpapi

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkAPI_100Clients is the load test: 100 concurrent clients on loopback,
// each sending a mix of reads (the settings list, one setting, the nodes, the
// recoveries) and one write in ten (a PUT with the token), through the real
// handlers and a real *settings.Settings. It reports the latency percentiles of
// every request (p50-ms, p99-ms). Run with:
//
//	go test -run '^$' -bench BenchmarkAPI_100Clients -benchtime 20x ./httpapi
func BenchmarkAPI_100Clients(b *testing.B) {
	const clients, perClient = 100, 20
	f := newFixture(b, nil, nil)
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	paths := []string{PathSettings, PathSettings + "/dry-run", PathNodes, PathRecoveries}
	var (
		mu  sync.Mutex
		lat []time.Duration
	)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		for c := 0; c < clients; c++ {
			wg.Go(func() {
				local := make([]time.Duration, 0, perClient)
				for j := 0; j < perClient; j++ {
					var req *http.Request
					if (c+j)%10 == 0 {
						req, _ = http.NewRequest(http.MethodPut, f.srv.URL+PathSettings+"/crash-loop-restart-limit",
							strings.NewReader(`{"value": "`+[]string{"5", "6"}[j%2]+`"}`))
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("Authorization", "Bearer "+testToken)
					} else {
						req, _ = http.NewRequest(http.MethodGet, f.srv.URL+paths[(c+j)%len(paths)], nil)
					}
					t0 := time.Now()
					res, err := hc.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					local = append(local, time.Since(t0))
					if res.StatusCode != http.StatusOK {
						b.Errorf("%s %s = %d", req.Method, req.URL.Path, res.StatusCode)
					}
				}
				mu.Lock()
				lat = append(lat, local...)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(len(lat))/b.Elapsed().Seconds(), "req/s")
}
