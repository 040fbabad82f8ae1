package controller

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/fenceapi/fenceapitest"
)

// A hung fencing back end holds no worker for longer than the fetch bound:
// 32 workers asking for one node's grants share one fetch, and all of them
// go on, with nothing proven, once it times out.
func TestProofs_HungBackEndHoldsNoWorker(t *testing.T) {
	f := fenceapitest.NewFake(time.Now())
	release := make(chan struct{})
	defer close(release)
	f.SetHook(func(ctx context.Context, method, _ string) error {
		if method != fenceapitest.MethodGrants {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-release:
			return nil
		}
	})
	p := newProofs(f, newNodeTracker(), time.Now)
	p.timeout = 200 * time.Millisecond
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := p.grants(context.Background(), "node-a")
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	if took := time.Since(start); took > 10*p.timeout {
		t.Fatalf("32 workers took %s to give up on a hung back end (bound %s)", took, p.timeout)
	}
	for err := range errs {
		if err == nil {
			t.Fatal("a worker got a proof from a back end that never answered")
		}
	}
	if n := f.Calls(fenceapitest.MethodGrants); n > 2 {
		t.Errorf("%d fetches of one node's grants; want them shared", n)
	}
}

// A worker whose own context ends stops waiting at once.
func TestProofs_CallerContextEndsTheWait(t *testing.T) {
	f := fenceapitest.NewFake(time.Now())
	f.SetHook(func(ctx context.Context, _, _ string) error { <-ctx.Done(); return ctx.Err() })
	p := newProofs(f, newNodeTracker(), time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.grants(ctx, "node-a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("grants with an ended context = %v, want context.Canceled", err)
	}
}
