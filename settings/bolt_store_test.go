package settings_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/vigil-storage/vigil/settings"
	"github.com/vigil-storage/vigil/settings/settingstest"
)

func openBolt(t *testing.T, path string) settings.Store {
	t.Helper()
	s, err := settings.OpenBolt(path)
	if err != nil {
		t.Fatalf("OpenBolt(%s): %v", path, err)
	}
	return s
}

func TestBoltStore_Conformance(t *testing.T) {
	settingstest.RunStoreConformance(t, settingstest.Backend{
		Persistent: true,
		New: func(t *testing.T) func(*testing.T) settings.Store {
			path := filepath.Join(t.TempDir(), "sub", "settings.db")
			return func(t *testing.T) settings.Store { return openBolt(t, path) }
		},
	})
}

func TestOpenBolt_NotABoltFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "junk.db")
	if err := os.WriteFile(path, []byte("this is not a bolt database, not at all......"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := settings.OpenBolt(path); err == nil {
		t.Fatal("OpenBolt on a junk file succeeded")
	}
}

func TestBoltStore_LockedTooLong(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.db")
	s, err := settings.OpenBolt(path, settings.WithLockTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Someone else holds the file open for writing (bbolt's exclusive flock).
	holder, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	start := time.Now()
	err = s.Set(context.Background(), "dry-run", "true")
	if !errors.Is(err, settings.ErrStoreUnavailable) {
		t.Fatalf("Set on a locked file = %v, want ErrStoreUnavailable", err)
	}
	// Well above 200ms for a loaded machine, yet below DefaultBoltLockTimeout: it
	// fails if the option were ignored.
	if d := time.Since(start); d >= settings.DefaultBoltLockTimeout-time.Second {
		t.Fatalf("Set waited %s for a 200ms lock timeout", d)
	}
}

// childEnv, when set, turns the test binary into a writer process: see
// TestBoltStore_TwoProcesses.
const childEnv = "VIGIL_SETTINGS_TEST_BOLT_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(boltChild(spec))
	}
	os.Exit(m.Run())
}

// boltChild writes n names "PREFIX-i" into the bolt file: spec is PATH|PREFIX|N.
func boltChild(spec string) int {
	var path, prefix string
	var n int
	if _, err := fmt.Sscanf(spec, "%s %s %d", &path, &prefix, &n); err != nil {
		fmt.Fprintln(os.Stderr, "bad child spec:", spec, err)
		return 2
	}
	s, err := settings.OpenBolt(path, settings.WithLockTimeout(30*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	for i := range n {
		if err := s.Set(context.Background(), prefix+"-"+strconv.Itoa(i), strconv.Itoa(i)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// TestBoltStore_TwoProcesses runs writer processes against one file at the same
// time, while this process watches it: every write of every process is there
// afterwards, the file is consistent, and the watcher saw the other processes'
// writes without polling.
func TestBoltStore_TwoProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.db")
	s := openBolt(t, path)
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const procs, perProc = 3, 25
	var cmds []*exec.Cmd
	for p := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s p%d %d", childEnv, path, p, perProc))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer process: %v", err)
		}
	}
	all, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for p := range procs {
		for i := range perProc {
			if name := fmt.Sprintf("p%d-%d", p, i); all[name] != strconv.Itoa(i) {
				t.Errorf("%s = %q, want %d: a write was lost", name, all[name], i)
			}
		}
	}
	checkBoltFile(t, path)
	// The watcher converges on every name the other processes wrote.
	seen := map[string]bool{}
	deadline := time.After(5 * time.Second)
	for len(seen) < procs*perProc {
		select {
		case ev := <-events:
			seen[ev.Name] = true
		case <-deadline:
			t.Fatalf("watcher saw %d of %d names written by other processes", len(seen), procs*perProc)
		}
	}
}

func checkBoltFile(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("bolt file inconsistent after concurrent writers: %v", err)
	}
}
