package fdkeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Keeper holds descriptors by volume id. The zero value is not usable: use New.
type Keeper struct {
	// Check refuses a descriptor put may not keep; New sets IsFuseDevice.
	Check func(fd int) error
	log   *slog.Logger

	mu      sync.Mutex
	entries map[string]held
}

type held struct {
	fd   int
	meta json.RawMessage
}

// New returns an empty Keeper that logs to log (nil: slog.Default()).
func New(log *slog.Logger) *Keeper {
	if log == nil {
		log = slog.Default()
	}
	return &Keeper{Check: IsFuseDevice, log: log, entries: map[string]held{}}
}

// IsFuseDevice refuses a descriptor that is not open on /dev/fuse.
func IsFuseDevice(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("descriptor: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 10 || unix.Minor(st.Rdev) != 229 {
		return errors.New("descriptor is not /dev/fuse (character device 10:229)")
	}
	return nil
}

// Listen creates the keeper's socket at path (mode 0600). A socket file left
// by a keeper that is gone is replaced; one that a live keeper answers on is
// refused, so two keepers never split the descriptors between them.
func Listen(path string) (*net.UnixListener, error) {
	if c, err := net.DialTimeout("unixpacket", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("--socket %s: another fd keeper is serving it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("--socket %s: %w", path, err)
	}
	old := unix.Umask(0o077)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("--socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("--socket %s: %w", path, err)
	}
	return l, nil
}

// Serve answers connections on l until ctx ends; then it closes l. The
// descriptors stay held until Close.
func (k *Keeper) Serve(ctx context.Context, l *net.UnixListener) error {
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		go k.serveConn(c)
	}
}

// Close lets go of every descriptor: their connections end unless another
// process holds them.
func (k *Keeper) Close() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := len(k.entries)
	for v, h := range k.entries {
		unix.Close(h.fd)
		delete(k.entries, v)
	}
	return n
}

// Len is the number of descriptors held.
func (k *Keeper) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.entries)
}

func (k *Keeper) serveConn(c *net.UnixConn) {
	defer c.Close()
	buf := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(maxFds*4))
	for {
		n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		fds, perr := parseRights(oob[:oobn])
		ans, fd := k.handle(buf[:n], fds, perr)
		out, _ := json.Marshal(ans)
		var rights []byte
		if fd >= 0 {
			rights = unix.UnixRights(fd)
		}
		_, _, err = c.WriteMsgUnix(out, rights, nil)
		if fd >= 0 {
			unix.Close(fd)
		}
		if err != nil {
			return
		}
	}
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// handle answers one request. It owns fds: it keeps the one a valid put
// carries and closes every other. It returns the descriptor to send back
// (a duplicate the caller closes after sending) or -1.
func (k *Keeper) handle(msg []byte, fds []int, rightsErr error) (answer, int) {
	keep := -1
	defer func() {
		for _, fd := range fds {
			if fd != keep {
				unix.Close(fd)
			}
		}
	}()
	var req request
	if err := json.Unmarshal(msg, &req); err != nil {
		return refuse("a request is one JSON object {\"op\", \"volume\", \"meta\"}: %v", err), -1
	}
	if rightsErr != nil {
		return refuse("descriptors attached to %q: %v", req.Op, rightsErr), -1
	}
	if req.Op == OpPut {
		ans, err := k.put(req, fds)
		if err == nil {
			keep = fds[0]
		}
		return ans, -1
	}
	if len(fds) > 0 {
		return refuse("%q takes no descriptor, got %d: only put does", req.Op, len(fds)), -1
	}
	switch req.Op {
	case OpGet:
		return k.get(req.Volume)
	case OpDrop:
		return k.drop(req.Volume), -1
	case OpList:
		if req.Volume != "" || len(req.Meta) > 0 {
			return refuse("list takes no volume and no meta"), -1
		}
		return k.list(), -1
	}
	return refuse("op %q: want put, get, drop or list", req.Op), -1
}

func refuse(format string, args ...any) answer {
	return answer{Code: codeBadRequest, Error: fmt.Sprintf(format, args...)}
}

func (k *Keeper) put(req request, fds []int) (answer, error) {
	if len(fds) != 1 {
		return refuse("put of volume %q carries %d descriptors: want exactly one", req.Volume, len(fds)), errors.New("refused")
	}
	for _, err := range []error{checkVolume(req.Volume), checkMeta(req.Meta), k.Check(fds[0])} {
		if err != nil {
			return refuse("put of volume %q: %v", req.Volume, err), err
		}
	}
	k.mu.Lock()
	old, replaced := k.entries[req.Volume]
	k.entries[req.Volume] = held{fd: fds[0], meta: slices.Clone(req.Meta)}
	k.mu.Unlock()
	if replaced {
		unix.Close(old.fd)
	}
	k.log.Info("holding descriptor", "volume", req.Volume, "replaced", replaced)
	return answer{}, nil
}

func (k *Keeper) get(volume string) (answer, int) {
	if err := checkVolume(volume); err != nil {
		return refuse("get: %v", err), -1
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	h, ok := k.entries[volume]
	if !ok {
		return answer{Code: codeNotFound, Error: fmt.Sprintf("no descriptor held for volume %q", volume)}, -1
	}
	fd, err := unix.FcntlInt(uintptr(h.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return answer{Code: codeInternal, Error: fmt.Sprintf("duplicate the descriptor of volume %q: %v", volume, err)}, -1
	}
	return answer{Meta: h.meta}, fd
}

func (k *Keeper) drop(volume string) answer {
	if err := checkVolume(volume); err != nil {
		return refuse("drop: %v", err)
	}
	k.mu.Lock()
	h, ok := k.entries[volume]
	delete(k.entries, volume)
	k.mu.Unlock()
	if !ok {
		return answer{Code: codeNotFound, Error: fmt.Sprintf("no descriptor held for volume %q", volume)}
	}
	unix.Close(h.fd)
	k.log.Info("dropped descriptor", "volume", volume)
	return answer{}
}

func (k *Keeper) list() answer {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := answer{Entries: []Entry{}}
	for v, h := range k.entries {
		out.Entries = append(out.Entries, Entry{Volume: v, Meta: h.meta})
	}
	slices.SortFunc(out.Entries, func(a, b Entry) int {
		if a.Volume < b.Volume {
			return -1
		}
		return 1
	})
	return out
}
