package fusedisk

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/vigil-storage/vigil/internal/testenv"
)

// memBackend is an in-memory Backend whose writes can be switched to fail.
type memBackend struct {
	mu      sync.Mutex
	data    []byte
	refuse  error
	flushes int
}

func (m *memBackend) ReadAt(_ context.Context, off int64, n int) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]byte, n)
	copy(out, m.data[off:])
	return out, nil
}

func (m *memBackend) WriteAt(_ context.Context, off int64, p []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refuse != nil {
		return m.refuse
	}
	copy(m.data[off:], p)
	return nil
}

func (m *memBackend) Flush(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flushes++
	return m.refuse
}

// snapshot copies n bytes at off and the flush count under the lock.
func (m *memBackend) snapshot(off, n int) (string, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return string(m.data[off : off+n]), m.flushes
}

func mountForTest(t *testing.T, b *memBackend, o Options) *Disk {
	t.Helper()
	testenv.RequireNoError(t, "FUSE", Usable())
	d, err := Mount(t.TempDir(), int64(len(b.data)), b, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Unmount(); err != nil {
			t.Error(err)
		}
	})
	return d
}

func TestDisk_ReadWrite_RoundTrip(t *testing.T) {
	b := &memBackend{data: make([]byte, 1<<20)}
	d := mountForTest(t, b, Options{})
	f, err := os.OpenFile(d.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("hello"), 4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, flushes := b.snapshot(4096, 5); got != "hello" || flushes == 0 {
		t.Fatalf("backend holds %q after %d flushes", got, flushes)
	}
	got := make([]byte, 5)
	if _, err := f.ReadAt(got, 4096); err != nil || string(got) != "hello" {
		t.Fatalf("read back %q, %v", got, err)
	}
	st, err := f.Stat()
	if err != nil || st.Size() != 1<<20 {
		t.Fatalf("size %v, %v", st, err)
	}
}

func TestDisk_Write_BackendRefusalIsEIO(t *testing.T) {
	b := &memBackend{data: make([]byte, 64<<10)}
	var seen []string
	var mu sync.Mutex
	d := mountForTest(t, b, Options{OnError: func(op string, _ int64, _ error) {
		mu.Lock()
		seen = append(seen, op)
		mu.Unlock()
	}})
	f, err := os.OpenFile(d.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b.mu.Lock()
	b.refuse = errors.New("fenced")
	b.mu.Unlock()
	if _, err := f.WriteAt([]byte("late"), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write after refusal: %v, want EIO", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync after refusal: %v, want EIO", err)
	}
	if got, _ := b.snapshot(0, 4); got == "late" {
		t.Fatal("refused write landed")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 2 {
		t.Fatalf("OnError saw %v, want write and flush", seen)
	}
}

func TestDisk_Write_PastEndIsENOSPC(t *testing.T) {
	b := &memBackend{data: make([]byte, 4096)}
	d := mountForTest(t, b, Options{})
	f, err := os.OpenFile(d.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("x"), 4096); err == nil {
		t.Fatal("write past the end succeeded")
	}
}

func TestMount_BadSize_Refused(t *testing.T) {
	for _, size := range []int64{0, -512, 1000} {
		if _, err := Mount(t.TempDir(), size, &memBackend{}, Options{}); !errors.Is(err, ErrInvalidSize) {
			t.Errorf("size %d: %v, want ErrInvalidSize", size, err)
		}
	}
}

func TestMount_DevFuse_NotInheritedByChildren(t *testing.T) {
	b := &memBackend{data: make([]byte, 4096)}
	mountForTest(t, b, Options{})
	out, err := exec.Command("sh", "-c", "ls -l /proc/self/fd/").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "/dev/fuse") {
		t.Fatalf("a child inherited /dev/fuse:\n%s", out)
	}
}

func TestAdopt_BadInput_Refused(t *testing.T) {
	good := Meta{Dir: "/mnt/d", Size: 1 << 20, MaxWrite: DefaultMaxWrite, Minor: 31}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, tc := range []struct {
		name string
		meta func(Meta) Meta
		want string
	}{
		{"relative dir", func(m Meta) Meta { m.Dir = "d"; return m }, "want an absolute path"},
		{"size not a multiple of 512", func(m Meta) Meta { m.Size = 1000; return m }, "want a positive multiple of 512"},
		{"max write too small", func(m Meta) Meta { m.MaxWrite = 512; return m }, "maxWrite 512"},
		{"protocol too old", func(m Meta) Meta { m.Minor = 12; return m }, "protocol minor 12"},
		{"not /dev/fuse", func(m Meta) Meta { return m }, "is not /dev/fuse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Adopt(int(r.Fd()), tc.meta(good), &memBackend{}, Options{})
			if !errors.Is(err, ErrInvalidMeta) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Adopt: %v, want ErrInvalidMeta saying %q", err, tc.want)
			}
			if d != nil {
				t.Fatal("a refused Adopt returned a Disk")
			}
		})
	}
	// The refused descriptor is left open: Adopt closes nothing it refused.
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatalf("the pipe after refused Adopts: %v", err)
	}
}
