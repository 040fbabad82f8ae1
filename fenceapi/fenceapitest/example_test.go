package fenceapitest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vigil-storage/vigil/fenceapi"
	"github.com/vigil-storage/vigil/fenceapi/fenceapitest"
)

// ExampleFake arranges a node that holds a volume and went silent, fences it,
// and shows an unreachable back end proving nothing: how a controller test
// uses the fake as its FenceBackend.
func ExampleFake() {
	ctx := context.Background()
	f := fenceapitest.NewFake(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	pv, _ := f.NewVolume(ctx, "pv-data")
	_, _ = f.Grant(ctx, pv, "node-a")
	_ = f.Heartbeat(ctx, "node-a")
	f.Advance(10 * time.Second)

	r, _ := f.Connectivity(ctx)
	silence, _ := r.Silence("node-a")
	fmt.Println("node-a silent for", silence)
	fenced, _ := f.FenceNode(ctx, "node-a")
	fmt.Printf("fenced %s at epoch %d\n", fenced[0].Handle, fenced[0].Epoch)

	f.SetUnavailable(true)
	_, err := f.Grants(ctx, "node-a")
	fmt.Println("unreachable:", errors.Is(err, fenceapi.ErrUnavailable), "calls:", f.Calls(fenceapitest.MethodGrants))
	// Output:
	// node-a silent for 10s
	// fenced pv-data at epoch 2
	// unreachable: true calls: 1
}
