package manager

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/httpapi"
)

// Before its cache synced the recoveries source says so (503 with a hint about
// the CRD); after, an absent record is ErrNotFound (404).
func TestRecoveryInformer_UnsyncedThenNotFound(t *testing.T) {
	srv := httptest.NewServer(&fakeAPIServer{objects: map[string][]byte{}})
	t.Cleanup(srv.Close)
	c, err := v1alpha1.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	r := newRecoveryInformer(c)
	ctx := context.Background()
	if _, err := r.Recoveries(ctx); !errors.Is(err, httpapi.ErrUnavailable) || !errors.Is(err, errRecoveriesNotSynced) {
		t.Fatalf("before sync: %v", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(20 * time.Second)
	for !r.informer.HasSynced() {
		if time.Now().After(deadline) {
			t.Fatal("the NodeRecovery informer did not sync in 20 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rs, err := r.Recoveries(ctx); err != nil || len(rs) != 0 {
		t.Fatalf("after sync: %v %v", rs, err)
	}
	if _, err := r.Recovery(ctx, "node-a-1"); !errors.Is(err, httpapi.ErrNotFound) {
		t.Fatalf("absent record: %v", err)
	}
}
