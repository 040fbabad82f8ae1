package client_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// TestClient_FailedVolume_CrossesTheWire: a volume whose flush failed is
// refused over gRPC and over the bulk channel with ErrVolumeFailed (gRPC
// DataLoss) and the server's explanation; the controller lists it and clears
// it, an engine may not.
func TestClient_FailedVolume_CrossesTheWire(t *testing.T) {
	faults := datapathtest.NewFaults()
	srv := datapathtest.Start(t, datapath.Options{OpenFile: faults.Open})
	ctx := context.Background()
	for _, bulk := range []bool{true, false} {
		c := dial(t, srv, client.WithBulk(bulk))
		v, err := c.CreateVolume(ctx, "pvc-bulk-"+map[bool]string{true: "on", false: "off"}[bulk], 64<<10, datapath.AccessRWO)
		if err != nil {
			t.Fatal(err)
		}
		e, err := c.Grant(ctx, v.ID, "n1")
		if err != nil {
			t.Fatal(err)
		}
		// 64 KiB: over the bulk channel, the size that goes through the
		// splice pipe, here into a File without a descriptor.
		big := bytes.Repeat([]byte("acknowledged"), 64<<10/12+1)[:64<<10]
		if err := c.WriteAt(ctx, v.ID, "n1", e, 0, big); err != nil {
			t.Fatal(err)
		}
		if got, err := c.ReadAt(ctx, v.ID, "n1", e, 0, len(big)); err != nil || !bytes.Equal(got, big) {
			t.Fatalf("read back the 64 KiB write: %v (equal %v)", err, bytes.Equal(got, big))
		}
		faults.FailNextSync(srv.Store.DataFile(v.ID))
		errs := map[string]error{"flush": c.Flush(ctx, v.ID, "n1", e)}
		errs["write"] = c.WriteAt(ctx, v.ID, "n1", e, 0, []byte("later"))
		_, errs["read"] = c.ReadAt(ctx, v.ID, "n1", e, 0, 8)
		for op, err := range errs {
			if !errors.Is(err, datapath.ErrVolumeFailed) || status.Code(err) != codes.DataLoss {
				t.Fatalf("bulk %v: %s of a failed volume: %v (code %s); want ErrVolumeFailed, DataLoss", bulk, op, err, status.Code(err))
			}
			if !strings.Contains(err.Error(), "clear-failure "+v.ID) {
				t.Fatalf("bulk %v: %s refusal does not say what to do: %v", bulk, op, err)
			}
		}
		failed, err := c.FailedVolumes(ctx)
		if err != nil || len(failed) == 0 || failed[len(failed)-1].Op != "flush" {
			t.Fatalf("FailedVolumes = %+v, %v", failed, err)
		}
		if err := c.Node("n1").ClearFailure(ctx, v.ID); !errors.Is(err, datapath.ErrPermissionDenied) {
			t.Fatalf("an engine clearing a failure: %v; want ErrPermissionDenied", err)
		}
		if err := c.ClearFailure(ctx, v.ID); err != nil {
			t.Fatalf("ClearFailure: %v", err)
		}
		if err := c.WriteAt(ctx, v.ID, "n1", e, 0, []byte("cleared")); err != nil {
			t.Fatalf("write after clearing: %v", err)
		}
		if err := c.ClearFailure(ctx, v.ID); !errors.Is(err, datapath.ErrInvalidArgument) {
			t.Fatalf("clearing a volume that is not failed: %v; want ErrInvalidArgument", err)
		}
	}
}
