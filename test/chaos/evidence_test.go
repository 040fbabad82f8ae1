package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSaveEvidence_CopiesLogsOnly(t *testing.T) {
	work, out := t.TempDir(), t.TempDir()
	files := map[string]string{
		"chaos/manager-a.1.log":         "lease acquired\n",
		"nodes/node-1/engine.log":       "heartbeat to the datapath failed\n",
		"nodes/node-1/ledger/db-0.json": "{}",
		"state.json":                    "{}",
	}
	for rel, body := range files {
		p := filepath.Join(work, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n, err := SaveEvidence(work, filepath.Join(out, "cycle-3-logs"))
	if err != nil || n != 2 {
		t.Fatalf("SaveEvidence = %d, %v; want the 2 logs", n, err)
	}
	for rel, body := range files {
		b, err := os.ReadFile(filepath.Join(out, "cycle-3-logs", rel))
		if strings.HasSuffix(rel, ".log") {
			if err != nil || string(b) != body {
				t.Errorf("%s: got %q, %v; want %q", rel, b, err, body)
			}
		} else if err == nil {
			t.Errorf("%s is not a log but was copied", rel)
		}
	}
}

func TestSaveEvidence_MissingWorkDir(t *testing.T) {
	if _, err := SaveEvidence(filepath.Join(t.TempDir(), "gone"), t.TempDir()); err != nil {
		t.Fatalf("a sandbox that is already gone has no logs, not an error: %v", err)
	}
}

func TestCopyTail_KeepsTheEnd(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "big.log")
	if err := os.WriteFile(src, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "sub", "big.log")
	if err := copyTail(src, dst, 4); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "6789" {
		t.Fatalf("copyTail kept %q; want the last 4 bytes %q", b, "6789")
	}
}
