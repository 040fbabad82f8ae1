package datapath

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// blockAt makes the first create or delete that reaches step wait there until
// release is called (later ones pass); reached yields that volume's id.
func blockAt(t *testing.T, s *Store, step string) (reached <-chan string, release func()) {
	t.Helper()
	ids, gate := make(chan string, 1), make(chan struct{})
	var taken atomic.Bool
	s.prov.hook = func(at, id string) {
		if at != step || taken.Swap(true) {
			return
		}
		ids <- id
		<-gate
	}
	var closeOnce sync.Once
	release = func() { closeOnce.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return ids, release
}

// within fails the test unless fn returns within d.
func within(t *testing.T, d time.Duration, what string, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- fn() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(d):
		t.Fatalf("%s: still waiting after %s", what, d)
	}
}

func visibleNames(t *testing.T, s *Store) []string {
	t.Helper()
	vs, err := s.ListVolumes()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}

func TestStore_CreateVolume_IOGoesOnWhileTheFileIsMade(t *testing.T) {
	for _, step := range []string{"create:file", "create:committed"} {
		t.Run(step, func(t *testing.T) {
			s := openTest(t, t.TempDir())
			busy := mustCreate(t, s, "busy", 1<<20, AccessRWO)
			e := mustGrant(t, s, busy.ID, "n1")
			reached, release := blockAt(t, s, step)
			created := make(chan error, 1)
			go func() { _, err := s.CreateVolume("new", 1<<20, AccessRWO); created <- err }()
			id := <-reached
			within(t, 10*time.Second, "write and flush on another volume while a create is at "+step, func() error {
				if err := s.WriteAt(busy.ID, "n1", e, 0, []byte("x")); err != nil {
					return err
				}
				return s.Flush(busy.ID, "n1", e)
			})
			within(t, 10*time.Second, "fence on another volume while a create is at "+step, func() error {
				_, err := s.Fence(busy.ID, "n1")
				return err
			})
			if _, err := s.GetVolume(id); !errors.Is(err, ErrNotFound) {
				t.Fatalf("GetVolume of the volume in the making = %v, want ErrNotFound: it is visible before it is published", err)
			}
			if got := visibleNames(t, s); slices.Contains(got, "new") {
				t.Fatalf("ListVolumes = %v lists the volume in the making", got)
			}
			release()
			if err := <-created; err != nil {
				t.Fatalf("CreateVolume: %v", err)
			}
			if _, err := s.GetVolume(id); err != nil {
				t.Fatalf("GetVolume after the create returned: %v", err)
			}
		})
	}
}

// TestStore_Provisioning_CrashAtEachStep copies the data directory, as a
// crash would leave it, at each step of a create and a delete where the data
// file and the record disagree, and opens the copy: it must open cleanly,
// hold every volume the live store showed at that moment (visible only once
// durable) and no data file that no volume names.
func TestStore_Provisioning_CrashAtEachStep(t *testing.T) {
	cases := []struct {
		step    string
		wantNew bool // the copy holds the volume being created or deleted
	}{
		{"create:file", false},
		{"create:committed", true},
		{"delete:committed", false},
	}
	for _, c := range cases {
		t.Run(c.step, func(t *testing.T) {
			dir, crashed := t.TempDir(), filepath.Join(t.TempDir(), "crashed")
			s := openTest(t, dir)
			mustCreate(t, s, "kept", 1<<20, AccessRWO)
			var doomed Volume
			if strings.HasPrefix(c.step, "delete") {
				doomed = mustCreate(t, s, "new", 1<<20, AccessRWO)
			}
			var live []string
			s.prov.hook = func(at, _ string) {
				if at != c.step {
					return
				}
				live = visibleNames(t, s)
				if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
					t.Errorf("copy the data directory: %v", err)
				}
			}
			if doomed.ID != "" {
				if err := s.DeleteVolume(doomed.ID); err != nil {
					t.Fatal(err)
				}
			} else {
				mustCreate(t, s, "new", 1<<20, AccessRWO)
			}
			if live == nil {
				t.Fatalf("step %s never reached", c.step)
			}
			after := openTest(t, crashed)
			got := visibleNames(t, after)
			for _, name := range live {
				if !slices.Contains(got, name) {
					t.Errorf("volume %q was visible at %s but is gone after the crash (live %v, after %v)", name, c.step, live, got)
				}
			}
			if has := slices.Contains(got, "new"); has != c.wantNew {
				t.Errorf("after a crash at %s the store holds %v; volume \"new\" there: %v, want %v", c.step, got, has, c.wantNew)
			}
			files, err := os.ReadDir(filepath.Join(crashed, volumesDir))
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != len(got) {
				t.Errorf("after a crash at %s: %d data files for %d volumes %v", c.step, len(files), len(got), got)
			}
		})
	}
}

// TestStore_DeleteVolume_CreateOfTheNameWaits holds a delete between its
// commit and the removal of its data file, and creates the same name: the
// create must not return the volume being deleted (whose file is about to
// go), but wait and make a new one.
func TestStore_DeleteVolume_CreateOfTheNameWaits(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	old := mustCreate(t, s, "a", 1<<20, AccessRWO)
	reached, release := blockAt(t, s, "delete:committed")
	deleted := make(chan error, 1)
	go func() { deleted <- s.DeleteVolume(old.ID) }()
	<-reached
	created := make(chan Volume, 1)
	go func() { created <- mustCreate(t, s, "a", 1<<20, AccessRWO) }()
	select {
	case v := <-created:
		t.Fatalf("CreateVolume(a) returned %s while the delete of %s is in flight", v.ID, old.ID)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	if err := <-deleted; err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	v := <-created
	if v.ID == old.ID {
		t.Fatalf("CreateVolume(a) returned the deleted volume %s", old.ID)
	}
	if _, err := os.Stat(s.imgPath(old.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data file of the deleted volume: %v", err)
	}
	e := mustGrant(t, s, v.ID, "n1")
	if err := s.WriteAt(v.ID, "n1", e, 0, []byte("new")); err != nil {
		t.Fatalf("write to the new volume: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := visibleNames(t, openTest(t, dir)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after reopening: %v, want [a]", got)
	}
}

// TestStore_CreateVolume_SameNameConcurrently holds one create after its
// file is made: a second create of the name waits for it and returns the same
// volume, and one of another size is refused, so one volume is made.
func TestStore_CreateVolume_SameNameConcurrently(t *testing.T) {
	s := openTest(t, t.TempDir())
	reached, release := blockAt(t, s, "create:file")
	first, second := make(chan Volume, 1), make(chan Volume, 1)
	go func() { first <- mustCreate(t, s, "a", 1<<20, AccessRWO) }()
	id := <-reached
	go func() { second <- mustCreate(t, s, "a", 1<<20, AccessRWO) }()
	differ := make(chan error, 1)
	go func() { _, err := s.CreateVolume("a", 2<<20, AccessRWO); differ <- err }()
	select {
	case v := <-second:
		t.Fatalf("second CreateVolume(a) returned %+v before the first made it", v)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	a, b := <-first, <-second
	if a.ID != id || b != a {
		t.Fatalf("creates returned %+v and %+v, want both %s", a, b, id)
	}
	if err := <-differ; !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("create of another size: %v, want ErrAlreadyExists", err)
	}
	if files, _ := os.ReadDir(filepath.Join(s.dir, volumesDir)); len(files) != 1 {
		t.Fatalf("%d data files, want 1", len(files))
	}
}

// TestStore_CreateVolume_InFlightCountsAgainstCapacity: a create in flight
// holds its size, so a concurrent one cannot be promised the same bytes.
func TestStore_CreateVolume_InFlightCountsAgainstCapacity(t *testing.T) {
	s, err := Open(t.TempDir(), Options{Capacity: 6 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	reached, release := blockAt(t, s, "create:file")
	created := make(chan error, 1)
	go func() { _, err := s.CreateVolume("first", 4<<20, AccessRWO); created <- err }()
	<-reached
	if _, err := s.CreateVolume("second", 4<<20, AccessRWO); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("second create while the first is in flight: %v, want ErrNoSpace", err)
	}
	if got, _ := s.Capacity(); got != 2<<20 {
		t.Fatalf("Capacity with a create in flight = %d, want %d", got, 2<<20)
	}
	release()
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Capacity(); got != 2<<20 {
		t.Fatalf("Capacity after the create = %d, want %d", got, 2<<20)
	}
}

// TestStore_Provisioning_ConcurrentCreateDeleteIO runs creates and deletes of
// one name against each other and against I/O on another volume, then checks
// that every volume has its data file and no file is left over, before and
// after reopening.
func TestStore_Provisioning_ConcurrentCreateDeleteIO(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	busy := mustCreate(t, s, "busy", 1<<20, AccessRWO)
	e := mustGrant(t, s, busy.ID, "n1")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.WriteAt(busy.ID, "n1", e, 0, []byte("x")); err != nil {
				t.Errorf("write: %v", err)
				return
			}
		}
	})
	for range 20 {
		v := mustCreate(t, s, "a", 64<<10, AccessRWO)
		var round sync.WaitGroup
		round.Go(func() {
			if err := s.DeleteVolume(v.ID); err != nil {
				t.Errorf("DeleteVolume: %v", err)
			}
		})
		round.Go(func() {
			if _, err := s.CreateVolume("a", 64<<10, AccessRWO); err != nil {
				t.Errorf("CreateVolume: %v", err)
			}
		})
		round.Wait()
		checkFilesMatchVolumes(t, s)
		if vs, _ := s.ListVolumes(); len(vs) == 2 {
			if err := s.DeleteVolume(vs[0].ID); err != nil { // "a" sorts first
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkFilesMatchVolumes(t, openTest(t, dir))
}

func checkFilesMatchVolumes(t *testing.T, s *Store) {
	t.Helper()
	vs, err := s.ListVolumes()
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, v := range vs {
		want = append(want, v.ID+imgSuffix)
	}
	files, err := os.ReadDir(filepath.Join(s.dir, volumesDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got = append(got, f.Name())
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("data files %v, volumes %v", got, want)
	}
}
