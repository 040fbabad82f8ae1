package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// TestClient_BootID_ReportedOnBothChannels: the boot id of the server's
// machine comes back with every read, flush and write, over gRPC and over the
// bulk channel, and a server without one (from before boot ids) reports "",
// with everything working as before.
func TestClient_BootID_ReportedOnBothChannels(t *testing.T) {
	for _, tc := range []struct {
		name, boot string
		bulk       bool
	}{
		{"bulk", "8b3f1c2e-0d4a-4b8e-9c61-5e2f7a0b1d93", true},
		{"grpc", "8b3f1c2e-0d4a-4b8e-9c61-5e2f7a0b1d93", false},
		{"no boot id", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := datapathtest.StartWith(t, datapathtest.Config{BootID: tc.boot})
			c := dial(t, srv, client.WithBulk(tc.bulk))
			ctx := context.Background()
			v, _ := c.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO)
			e, err := c.Grant(ctx, v.ID, "n1")
			if err != nil {
				t.Fatal(err)
			}
			calls := map[string]func(context.Context) error{
				"write": func(ctx context.Context) error { return c.WriteAt(ctx, v.ID, "n1", e, 0, []byte("data")) },
				"read":  func(ctx context.Context) error { _, err := c.ReadAt(ctx, v.ID, "n1", e, 0, 4); return err },
				"flush": func(ctx context.Context) error { return c.Flush(ctx, v.ID, "n1", e) },
			}
			for name, call := range calls {
				got := "unset"
				if err := call(datapath.WithBootRecorder(ctx, &got)); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if got != tc.boot {
					t.Errorf("%s: boot id %q, want %q", name, got, tc.boot)
				}
			}
			if err := c.WriteAt(ctx, v.ID, "n1", e, 0, []byte("data")); err != nil {
				t.Fatalf("a write without a recorder: %v", err)
			}
		})
	}
}

// TestReadBootID_BadFilesClearErrors: a boot id file that is missing, empty,
// too long or holds other characters is refused with its name and what is
// allowed; NewServer refuses a bad id too.
func TestReadBootID_BadFilesClearErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if id, err := datapath.ReadBootID(write("good", " 8b3f1c2e-0d4a-4b8e-9c61-5e2f7a0b1d93\n")); err != nil || id != "8b3f1c2e-0d4a-4b8e-9c61-5e2f7a0b1d93" {
		t.Fatalf("good file: %q, %v", id, err)
	}
	for name, tc := range map[string]struct{ path, want string }{
		"missing":  {filepath.Join(dir, "none"), "no such file"},
		"empty":    {write("empty", "\n"), "want 1 to 64 characters"},
		"too long": {write("long", strings.Repeat("a", 65)), "want 1 to 64 characters"},
		"spaces":   {write("spaces", "a b"), "letters, digits"},
		"newline":  {write("lines", "a\nb"), "letters, digits"},
	} {
		_, err := datapath.ReadBootID(tc.path)
		if !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrInvalidArgument saying %q", name, err, tc.want)
		}
	}
	store, err := datapath.Open(t.TempDir(), datapath.Options{Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := datapath.NewServer(store, &datapath.StaticTokens{}, datapath.WithBootID("a b")); !errors.Is(err, datapath.ErrInvalidArgument) {
		t.Fatalf("NewServer with a bad boot id: %v", err)
	}
}
