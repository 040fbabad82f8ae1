package settings_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-storage/vigil/settings"
)

// fullBolt is a bolt store whose history already holds HistoryLimit records, so
// every write also drops the oldest.
func fullBolt(b *testing.B) settings.Store {
	b.Helper()
	store, err := settings.OpenBolt(filepath.Join(b.TempDir(), "settings.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	var records []settings.ChangeRecord
	for i := range settings.HistoryLimit {
		records = append(records, settings.ChangeRecord{Time: time.Now(), Setting: "crash-loop-restart-limit",
			Old: strconv.Itoa(i), New: strconv.Itoa(i + 1), OldSource: settings.SourceStore, NewSource: settings.SourceStore,
			Actor: settings.Actor{Source: settings.ActorAPI, Identity: "bench"}})
	}
	err = store.Update(context.Background(), func(map[string]string, func(func(settings.ChangeRecord) bool) (settings.ChangeRecord, bool)) ([]settings.ChangeRecord, error) {
		return records, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return store
}

// BenchmarkSettings_SetMany_Bolt500: one SetMany of three settings (three
// records) on a bolt file whose history is full: validation, one write
// transaction with the file opened and locked, fsync, the oldest records
// dropped, the values put in force.
func BenchmarkSettings_SetMany_Bolt500(b *testing.B) {
	store := fullBolt(b)
	s, err := settings.New(store, "", settings.WithRegisterer(prometheus.NewRegistry()),
		settings.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	who := settings.Actor{Source: settings.ActorAPI, Identity: "bench"}
	values := [2]map[string]string{
		{"dry-run": "true", "node-down-grace-period": "5s", "node-down-pod-deletion-policy": "delete-both-statefulset-and-deployment-pod"},
		{"dry-run": "false", "node-down-grace-period": "6s", "node-down-pod-deletion-policy": "do-nothing"},
	}
	i := 0
	for b.Loop() {
		if err := s.SetMany(ctx, values[i%2], who); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if h, _ := store.History(ctx, 0); len(h) != settings.HistoryLimit {
		b.Fatalf("%d records, want %d", len(h), settings.HistoryLimit)
	}
}

// BenchmarkSettings_History_Bolt500 reads a full history of a bolt file: all
// 500 records, and the 50 the CLI shows by default.
func BenchmarkSettings_History_Bolt500(b *testing.B) {
	store := fullBolt(b)
	ctx := context.Background()
	for _, limit := range []int{0, 50} {
		b.Run("limit="+strconv.Itoa(limit), func(b *testing.B) {
			want := limit
			if want == 0 {
				want = settings.HistoryLimit
			}
			for b.Loop() {
				h, err := store.History(ctx, limit)
				if err != nil || len(h) != want {
					b.Fatalf("History(%d) = %d records, %v", limit, len(h), err)
				}
			}
		})
	}
}
