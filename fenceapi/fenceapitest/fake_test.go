package fenceapitest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/fenceapi"
	"github.com/vigil-storage/vigil/fenceapi/fenceapitest"
)

var start = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func TestFake_Conformance(t *testing.T) {
	fenceapitest.RunConformance(t, fenceapitest.Backend{
		New: func(t *testing.T) (fenceapitest.FenceBackend, fenceapitest.Control) {
			f := fenceapitest.NewFake(start)
			return f, f
		},
	})
}

func TestFake_Calls_CountedEvenWhenFailing(t *testing.T) {
	f := fenceapitest.NewFake(start)
	ctx := context.Background()
	_, _ = f.FenceNode(ctx, "n1")
	f.SetUnavailable(true)
	_, _ = f.FenceNode(ctx, "n1")
	_, _ = f.Grants(ctx, "n1")
	if got := f.Calls(fenceapitest.MethodFenceNode); got != 2 {
		t.Fatalf("FenceNode calls = %d, want 2", got)
	}
	if got := f.Calls(fenceapitest.MethodGrants); got != 1 {
		t.Fatalf("Grants calls = %d, want 1", got)
	}
	if got := f.Calls(fenceapitest.MethodConnectivity); got != 0 {
		t.Fatalf("Connectivity calls = %d, want 0", got)
	}
	if f.Driver() != vigil.DriverName {
		t.Fatalf("Driver = %q", f.Driver())
	}
}

func TestFake_FailWith_ChangesNothingUntilCleared(t *testing.T) {
	f := fenceapitest.NewFake(start)
	ctx := context.Background()
	h, _ := f.NewVolume(ctx, "pv-1")
	e, _ := f.Grant(ctx, h, "n1")
	boom := errors.New("boom")
	f.FailWith(fenceapitest.MethodFenceNode, boom)
	if fs, err := f.FenceNode(ctx, "n1"); !errors.Is(err, boom) || fs != nil {
		t.Fatalf("injected failure: %v, %v", fs, err)
	}
	if gs, _ := f.Grants(ctx, "n1"); len(gs) != 1 || !gs[0].State.Live() || gs[0].Epoch != e {
		t.Fatalf("a failed FenceNode changed the rows: %+v", gs)
	}
	f.FailWith(fenceapitest.MethodFenceNode, nil)
	if fs, err := f.FenceNode(ctx, "n1"); err != nil || len(fs) != 1 || fs[0].Epoch != e+1 {
		t.Fatalf("after clearing the failure: %+v, %v", fs, err)
	}
}

func TestFake_SetHook_HoldsACallInFlight(t *testing.T) {
	f := fenceapitest.NewFake(start)
	ctx := context.Background()
	h, _ := f.NewVolume(ctx, "pv-1")
	_, _ = f.Grant(ctx, h, "n1")
	entered, release := make(chan string, 1), make(chan struct{})
	f.SetHook(func(_ context.Context, method, node string) error {
		if method == fenceapitest.MethodFenceNode {
			entered <- node
			<-release
		}
		return nil
	})
	var wg sync.WaitGroup
	wg.Add(1)
	var fenced []fenceapi.Fenced
	go func() { defer wg.Done(); fenced, _ = f.FenceNode(ctx, "n1") }()
	if node := <-entered; node != "n1" {
		t.Fatalf("hook saw node %q", node)
	}
	// While FenceNode is held, the grant is still live.
	if gs, _ := f.Grants(ctx, "n1"); !gs[0].State.Live() {
		t.Fatal("the held FenceNode already fenced")
	}
	close(release)
	wg.Wait()
	if len(fenced) != 1 {
		t.Fatalf("FenceNode after release = %+v", fenced)
	}
	f.SetHook(func(context.Context, string, string) error { return fenceapi.ErrUnavailable })
	if _, err := f.Connectivity(ctx); !errors.Is(err, fenceapi.ErrUnavailable) {
		t.Fatalf("hook error not returned: %v", err)
	}
}

func TestFake_Control_BadInput(t *testing.T) {
	f := fenceapitest.NewFake(start)
	ctx := context.Background()
	if _, err := f.NewVolume(ctx, ""); err == nil {
		t.Error("empty handle accepted")
	}
	h, _ := f.NewVolume(ctx, "pv-1")
	if _, err := f.NewVolume(ctx, "pv-1"); err == nil {
		t.Error("duplicate handle accepted")
	}
	if _, err := f.Grant(ctx, "pv-missing", "n1"); err == nil {
		t.Error("grant of an unknown volume accepted")
	}
	if _, err := f.Grant(ctx, h, "bad node"); err == nil {
		t.Error("bad node name accepted")
	}
	_, _ = f.Grant(ctx, h, "n1")
	if _, err := f.Grant(ctx, h, "n2"); !errors.Is(err, fenceapitest.ErrFakeAttachedElsewhere) {
		t.Errorf("second RWO grant: %v", err)
	}
	if err := f.Leave(ctx, "n1", -time.Second); err == nil {
		t.Error("negative leave accepted")
	}
	if err := f.Leave(ctx, "n1", time.Hour); err != nil {
		t.Fatal(err)
	}
	r, _ := f.Connectivity(ctx)
	if len(r.Nodes) != 1 || !r.Nodes[0].LeavingUntil.Equal(start.Add(fenceapitest.FakeMaxLeave)) {
		t.Errorf("an hour's leave is not cut to %s: %+v", fenceapitest.FakeMaxLeave, r.Nodes)
	}
}
