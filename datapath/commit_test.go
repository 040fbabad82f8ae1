package datapath

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestGroupCommit_Update_ConcurrentAndIsolatedFailures(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "g.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err }); err != nil {
		t.Fatal(err)
	}
	g := groupCommit{db: db}
	boom := errors.New("boom")
	var wg sync.WaitGroup
	errs := make([]error, 64)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = g.update(func(tx *bolt.Tx) error {
				if i%16 == 5 {
					return boom
				}
				return tx.Bucket([]byte("b")).Put(fmt.Appendf(nil, "k%02d", i), []byte("v"))
			})
		}()
	}
	wg.Wait()
	_ = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("b"))
		for i, err := range errs {
			stored := b.Get(fmt.Appendf(nil, "k%02d", i)) != nil
			switch {
			case i%16 == 5 && (!errors.Is(err, boom) || stored):
				t.Errorf("update %d: err %v, stored %v; want boom and nothing stored", i, err, stored)
			case i%16 != 5 && (err != nil || !stored):
				t.Errorf("update %d: err %v, stored %v; want committed", i, err, stored)
			}
		}
		return nil
	})
	if g.running || len(g.pending) != 0 {
		t.Fatalf("committer left running=%v pending=%d", g.running, len(g.pending))
	}
}
