package powerfs_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/vigil-storage/vigil/internal/powerfs/powerfstest"
	"github.com/vigil-storage/vigil/internal/testenv"
)

// Environment of the bbolt writer child: its database path, and whether its
// commits skip fdatasync (a db broken on purpose).
const (
	boltChildEnv  = "VIGIL_POWERFS_TEST_BOLT"
	boltNoSyncEnv = "VIGIL_POWERFS_TEST_BOLT_NOSYNC"
)

func TestMain(m *testing.M) {
	powerfstest.RunIfChild()
	if path := os.Getenv(boltChildEnv); path != "" {
		os.Exit(runBoltWriter(path, os.Getenv(boltNoSyncEnv) == "1"))
	}
	os.Exit(testenv.Main(m))
}

func writeFile(t *testing.T, path string, off int64, p []byte, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(p, off); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func checkFile(t *testing.T, when, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %s is %d bytes starting %q; want %d bytes starting %q", when, filepath.Base(path), len(got), got[:min(len(got), 16)], len(want), want[:min(len(want), 16)])
	}
}

// TestLayer_Cut_KeepsSyncedDropsUnsynced writes through the layer, some of it
// fsynced and some not, cuts the power (SIGKILL of the layer), mounts a new
// layer on the same backing directory and checks that exactly the fsynced
// state is there: contents, truncations (truncate(2) and O_TRUNC), fallocated
// sizes, and what a file opened O_SYNC wrote.
func TestLayer_Cut_KeepsSyncedDropsUnsynced(t *testing.T) {
	powerfstest.Require(t)
	backing, mnt := t.TempDir(), t.TempDir()
	l := powerfstest.Start(t, backing, mnt)
	a, b, c, d := filepath.Join(mnt, "a"), filepath.Join(mnt, "b"), filepath.Join(mnt, "c"), filepath.Join(mnt, "d")
	as, bs, cs := bytes.Repeat([]byte("A"), 8192), bytes.Repeat([]byte("B"), 4096), bytes.Repeat([]byte("C"), 4096)
	writeFile(t, a, 0, as, true)
	writeFile(t, a, 0, bs, false)
	writeFile(t, a, 8192, cs, false)
	writeFile(t, b, 0, []byte("not synced"), false)
	ds := bytes.Repeat([]byte("D"), 100)
	writeFile(t, c, 0, ds, true)
	if err := os.Truncate(c, 10); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(d, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	e, g := filepath.Join(mnt, "e"), filepath.Join(mnt, "g")
	writeFile(t, e, 0, []byte("synced before O_TRUNC"), true)
	if err := os.WriteFile(e, []byte("after O_TRUNC, not synced"), 0o600); err != nil { // O_TRUNC
		t.Fatal(err)
	}
	f, err = os.OpenFile(g, os.O_RDWR|os.O_CREATE|os.O_SYNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("O_SYNC: synced by the write"), 0); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	checkFile(t, "before the cut", a, append(append(append([]byte{}, bs...), as[4096:]...), cs...))
	checkFile(t, "before the cut", b, []byte("not synced"))
	checkFile(t, "before the cut", c, ds[:10])
	if raw, _ := os.ReadFile(filepath.Join(backing, "a")); !bytes.Equal(raw, as) {
		t.Fatalf("the backing file took unsynced writes before the cut: %d bytes starting %q", len(raw), raw[:min(len(raw), 16)])
	}

	powerfstest.Cut(t, l)
	powerfstest.Start(t, backing, mnt)
	checkFile(t, "after the cut", a, as)
	checkFile(t, "after the cut", b, nil) // the name was created at once; its data was not synced
	checkFile(t, "after the cut", c, ds)
	checkFile(t, "after the cut", e, []byte("synced before O_TRUNC"))
	checkFile(t, "after the cut", g, []byte("O_SYNC: synced by the write"))
	if fi, err := os.Stat(d); err != nil || fi.Size() != 1<<20 {
		t.Fatalf("after the cut: fallocated and synced file: %v, %v; want 1 MiB", fi, err)
	}
}

// runBoltWriter is the bbolt child: it commits one key per transaction and
// prints "ACK n" once commit n returned, until it is killed.
func runBoltWriter(path string, noSync bool) int {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bolt writer:", err)
		return 1
	}
	db.NoSync = noSync // broken on purpose: commits skip fdatasync
	val := bytes.Repeat([]byte("v"), 200)
	for seq := uint64(1); ; seq++ {
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("k"))
			if err != nil {
				return err
			}
			return b.Put(binary.BigEndian.AppendUint64(nil, seq), val)
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "bolt writer:", err)
			return 1
		}
		fmt.Printf("ACK %d\n", seq)
	}
}

// cutBolt runs the bbolt writer over a layer, cuts the power after at least
// minAcked acknowledged commits, remounts, and returns how many commits were
// acknowledged and which of them are missing.
func cutBolt(t *testing.T, noSync bool) (acked int, lost []int) {
	powerfstest.Require(t)
	backing, mnt := t.TempDir(), t.TempDir()
	l := powerfstest.Start(t, backing, mnt)
	path := filepath.Join(mnt, "test.db")
	env := []string{boltChildEnv + "=" + path}
	if noSync {
		env = append(env, boltNoSyncEnv+"=1")
	}
	acked = powerfstest.CutMidStream(t, l, env, 200, "commits")

	powerfstest.Start(t, backing, mnt)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, ReadOnly: true})
	if err != nil {
		t.Fatalf("open the db after the cut: %v", err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("k"))
		for seq := 1; seq <= acked; seq++ {
			if b == nil || b.Get(binary.BigEndian.AppendUint64(nil, uint64(seq))) == nil {
				lost = append(lost, seq)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return acked, lost
}

// TestLayer_Bolt_CommittedSurviveCut: every transaction bbolt acknowledged
// before the power cut is there after it.
func TestLayer_Bolt_CommittedSurviveCut(t *testing.T) {
	acked, lost := cutBolt(t, false)
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged commits lost in the power cut (first %d, last %d)", len(lost), acked, lost[0], lost[len(lost)-1])
	}
	t.Logf("%d acknowledged commits, none lost", acked)
}

// TestLayer_Bolt_NoSyncLosesCommits proves the layer can see a lost commit:
// the same writer with fdatasync skipped (bbolt's NoSync) loses acknowledged
// transactions in the cut, which a plain SIGKILL would never show.
func TestLayer_Bolt_NoSyncLosesCommits(t *testing.T) {
	acked, lost := cutBolt(t, true)
	if len(lost) == 0 {
		t.Fatalf("a db that never fdatasyncs kept all %d acknowledged commits through the power cut: the layer does not drop unsynced writes", acked)
	}
	t.Logf("%d of %d acknowledged commits lost without fdatasync, as they must be", len(lost), acked)
}
