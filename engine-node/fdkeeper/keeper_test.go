package fdkeeper

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// startKeeper serves a Keeper that accepts any descriptor (pipes in tests).
func startKeeper(t *testing.T) (*Keeper, Client) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keeper.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	k := New(nil)
	k.Check = func(int) error { return nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		k.Close()
	})
	return k, Client{Path: path}
}

// pipeFd returns the read end of a pipe whose write end holds marker.
func pipeFd(t *testing.T, marker string) int {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(p[1], []byte(marker)); err != nil {
		t.Fatal(err)
	}
	unix.Close(p[1])
	t.Cleanup(func() { unix.Close(p[0]) })
	return p[0]
}

type meta struct {
	Epoch uint64 `json:"epoch"`
}

func TestKeeper_PutGetDropList(t *testing.T) {
	k, c := startKeeper(t)
	if err := c.Put("vol-a", pipeFd(t, "a"), meta{Epoch: 3}); err != nil {
		t.Fatal(err)
	}
	if err := c.Put("vol-b", pipeFd(t, "b"), meta{Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	var m meta
	fd, err := c.Get("vol-a", &m)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1)
	if _, err := unix.Read(fd, got); err != nil || string(got) != "a" || m.Epoch != 3 {
		t.Fatalf("get vol-a: read %q (%v), meta %+v", got, err, m)
	}
	unix.Close(fd)
	list, err := c.List()
	if err != nil || len(list) != 2 || list[0].Volume != "vol-a" || list[1].Volume != "vol-b" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if err := c.Drop("vol-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get("vol-a", &m); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after drop: %v, want ErrNotFound", err)
	}
	if err := c.Drop("vol-a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second drop: %v, want ErrNotFound", err)
	}
	if k.Len() != 1 {
		t.Fatalf("keeper holds %d, want 1", k.Len())
	}
}

func TestKeeper_Put_ReplacesAndClosesTheOld(t *testing.T) {
	_, c := startKeeper(t)
	if err := c.Put("v", pipeFd(t, "1"), meta{Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.Put("v", pipeFd(t, "2"), meta{Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	var m meta
	fd, err := c.Get("v", &m)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	got := make([]byte, 1)
	if _, err := unix.Read(fd, got); err != nil || string(got) != "2" || m.Epoch != 2 {
		t.Fatalf("read %q (%v), meta %+v: want the second put", got, err, m)
	}
}

// rawCall sends msg with fds and returns the answer and any descriptor.
func rawCall(t *testing.T, c Client, msg string, fds ...int) (answer, int) {
	t.Helper()
	conn, err := net.Dial("unixpacket", c.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var rights []byte
	if len(fds) > 0 {
		rights = unix.UnixRights(fds...)
	}
	if _, _, err := conn.(*net.UnixConn).WriteMsgUnix([]byte(msg), rights, nil); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, maxMessage), make([]byte, unix.CmsgSpace(maxFds*4))
	n, oobn, _, _, err := conn.(*net.UnixConn).ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := parseRights(oob[:oobn])
	var a answer
	if err := json.Unmarshal(buf[:n], &a); err != nil {
		t.Fatal(err)
	}
	fd := -1
	if len(got) > 0 {
		fd = got[0]
	}
	return a, fd
}

func TestKeeper_BadRequests_ChangeNothing(t *testing.T) {
	k, c := startKeeper(t)
	if err := c.Put("kept", pipeFd(t, "k"), meta{Epoch: 7}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", MaxVolumeLen+1)
	big := `{"a":"` + strings.Repeat("y", MaxMetaLen) + `"}`
	cases := []struct {
		name, msg, want string
		fds             int
	}{
		{"not JSON", `put kept`, "one JSON object", 0},
		{"unknown op", `{"op":"steal","volume":"kept"}`, `want put, get, drop or list`, 0},
		{"put without descriptor", `{"op":"put","volume":"kept","meta":{}}`, "want exactly one", 0},
		{"put with two descriptors", `{"op":"put","volume":"kept","meta":{}}`, "want exactly one", 2},
		{"put without volume", `{"op":"put","meta":{}}`, "want 1 to 256 bytes", 1},
		{"put with a long volume", `{"op":"put","volume":"` + long + `","meta":{}}`, "want 1 to 256 bytes", 1},
		{"put with a space in the volume", `{"op":"put","volume":"a b","meta":{}}`, "not printable", 1},
		{"put without meta", `{"op":"put","volume":"kept"}`, "want a JSON object", 1},
		{"put with meta not an object", `{"op":"put","volume":"kept","meta":[1]}`, "want a JSON object", 1},
		{"put with meta too big", `{"op":"put","volume":"kept","meta":` + big + `}`, "want a JSON object of 1 to 4096 bytes", 1},
		{"get with a descriptor", `{"op":"get","volume":"kept"}`, "takes no descriptor", 1},
		{"drop with a descriptor", `{"op":"drop","volume":"kept"}`, "takes no descriptor", 1},
		{"drop without volume", `{"op":"drop"}`, "want 1 to 256 bytes", 0},
		{"list with a volume", `{"op":"list","volume":"kept"}`, "list takes no volume", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var fds []int
			for i := 0; i < tc.fds; i++ {
				fds = append(fds, pipeFd(t, "bad"))
			}
			a, fd := rawCall(t, c, tc.msg, fds...)
			if fd >= 0 {
				unix.Close(fd)
				t.Error("a refused request got a descriptor back")
			}
			if a.Code != codeBadRequest || !strings.Contains(a.Error, tc.want) {
				t.Errorf("answer %+v: want code %s and an error containing %q", a, codeBadRequest, tc.want)
			}
		})
	}
	var m meta
	fd, err := c.Get("kept", &m)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	got := make([]byte, 1)
	if _, err := unix.Read(fd, got); err != nil || string(got) != "k" || m.Epoch != 7 || k.Len() != 1 {
		t.Fatalf("after bad requests: read %q (%v), meta %+v, %d held: want only the first put, unchanged", got, err, m, k.Len())
	}
}

func TestKeeper_Put_RefusesWhatIsNotFuse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	k := New(nil) // the real check
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Serve(ctx, l)
	err = Client{Path: path}.Put("v", pipeFd(t, "x"), meta{})
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "not /dev/fuse") || k.Len() != 0 {
		t.Fatalf("put of a pipe: %v, %d held; want refused as not /dev/fuse", err, k.Len())
	}
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err == nil {
		defer f.Close()
		if err := (Client{Path: path}).Put("v", int(f.Fd()), meta{}); err != nil || k.Len() != 1 {
			t.Fatalf("put of /dev/fuse: %v, %d held", err, k.Len())
		}
	}
}

func TestListen_LiveKeeperRefusedStaleSocketReplaced(t *testing.T) {
	_, c := startKeeper(t)
	if _, err := Listen(c.Path); err == nil || !strings.Contains(err.Error(), "another fd keeper") {
		t.Fatalf("second Listen on a live socket: %v", err)
	}
	stale := filepath.Join(t.TempDir(), "stale.sock")
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Listen(stale)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if st, err := os.Stat(stale); err != nil || st.Mode().Perm() != 0o600 || st.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket %v, %v: want a socket of mode 0600", st, err)
	}
}
