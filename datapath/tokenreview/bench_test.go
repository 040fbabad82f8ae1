package tokenreview

import (
	"context"
	"strings"
	"testing"
	"time"

	vigil "github.com/vigil-storage/vigil"
)

// BenchmarkAuthenticator_CacheHit is the cost TokenReview authentication adds
// to a datapath call whose token was reviewed within the TTL: a SHA-256 of a
// ServiceAccount-sized token (~1 KiB JWT), a map lookup under a mutex. Run in
// parallel, as the server's calls are.
func BenchmarkAuthenticator_CacheHit(b *testing.B) {
	tok := jwt("system:serviceaccount:vigil-system:vigil-engine-node"+strings.Repeat("x", 900), time.Now().Add(time.Hour))
	f := &fakeReviewer{users: map[string]fakeUser{tok: {name: engineSA.Username(), node: "node-a", audience: vigil.DatapathTokenAudience}}}
	a, err := New(Config{Reviewer: f, Engines: []ServiceAccount{engineSA}, TTL: MaxTTL})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := a.Authenticate(context.Background(), tok); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(tok)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if id, err := a.Authenticate(ctx, tok); err != nil || id.Node != "node-a" {
				b.Fatal(id, err)
			}
		}
	})
	b.StopTimer()
	if n := f.calls.Load(); n != 1 {
		b.Fatalf("%d TokenReviews; the benchmark must hit the cache", n)
	}
}
