package client_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// TestClient_Replicated_BootIsTheHolders: a volume of three copies on three
// machines of their own boot ids: every write, flush and read records the
// boot id of the holder's machine, never another replica's (the engine takes
// a boot id that changes for a reboot, and sends its kept writes again).
func TestClient_Replicated_BootIsTheHolders(t *testing.T) {
	ctx := context.Background()
	srvs := datapathtest.StartGroupWith(t, 3, datapathtest.GroupConfig{Timing: datapathtest.GroupTiming,
		BootID: func(i int) string { return fmt.Sprintf("boot-of-server-%d", i) }})
	r := startReplicas(t, ctx, srvs, "pvc-boot", 1<<20, 3)
	want := ""
	for i, s := range srvs {
		if s == r.holder {
			want = fmt.Sprintf("boot-of-server-%d", i)
		}
	}
	eng := r.engine(t, ctx)
	for i := range 50 {
		for name, call := range map[string]func(context.Context) error{
			"write": func(ctx context.Context) error {
				return eng.WriteAt(ctx, r.vol, "n1", r.epoch, int64(i)*512, []byte("data"))
			},
			"flush": func(ctx context.Context) error { return eng.Flush(ctx, r.vol, "n1", r.epoch) },
			"read":  func(ctx context.Context) error { _, err := eng.ReadAt(ctx, r.vol, "n1", r.epoch, 0, 4); return err },
		} {
			got := "unset"
			if err := call(datapath.WithBootRecorder(ctx, &got)); err != nil {
				t.Fatalf("%s %d: %v", name, i, err)
			}
			if got != want {
				t.Fatalf("%s %d: boot id %q, want the holder's %q", name, i, got, want)
			}
		}
	}
}
