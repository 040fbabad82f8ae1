package fdkeeper

import (
	"encoding/json"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// Client talks to a keeper at a socket path; every call is one connection,
// so a keeper restarted on the same path is reached by the next call.
type Client struct {
	// Path of the keeper's socket.
	Path string
	// Timeout bounds one call; 0 means 5 s.
	Timeout time.Duration
}

// Put hands the keeper a duplicate of fd for volume, with meta (marshalled
// to a JSON object), replacing what it held for volume.
func (c Client) Put(volume string, fd int, meta any) error {
	m, err := json.Marshal(meta)
	if err != nil {
		return fmt.Errorf("fd keeper put %s: %w", volume, err)
	}
	_, _, err = c.call(request{Op: OpPut, Volume: volume, Meta: m}, unix.UnixRights(fd))
	return err
}

// Get returns a duplicate of the descriptor held for volume (the caller owns
// it) and unmarshals its metadata into meta; ErrNotFound when none is held.
func (c Client) Get(volume string, meta any) (int, error) {
	ans, fd, err := c.call(request{Op: OpGet, Volume: volume}, nil)
	if err != nil {
		return -1, err
	}
	if fd < 0 {
		return -1, fmt.Errorf("fd keeper get %s: the answer carried no descriptor", volume)
	}
	if err := json.Unmarshal(ans.Meta, meta); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("fd keeper get %s: metadata: %w", volume, err)
	}
	return fd, nil
}

// Drop makes the keeper let go of volume's descriptor; ErrNotFound when none is held.
func (c Client) Drop(volume string) error {
	_, _, err := c.call(request{Op: OpDrop, Volume: volume}, nil)
	return err
}

// List returns what the keeper holds, by volume.
func (c Client) List() ([]Entry, error) {
	ans, _, err := c.call(request{Op: OpList}, nil)
	return ans.Entries, err
}

// call sends one request and reads its answer, with any descriptor in it.
func (c Client) call(req request, rights []byte) (answer, int, error) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	conn, err := net.DialTimeout("unixpacket", c.Path, timeout)
	if err != nil {
		return answer{}, -1, fmt.Errorf("fd keeper at %s: %w", c.Path, err)
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	_ = uc.SetDeadline(time.Now().Add(timeout))
	msg, err := json.Marshal(req)
	if err != nil {
		return answer{}, -1, err
	}
	if _, _, err := uc.WriteMsgUnix(msg, rights, nil); err != nil {
		return answer{}, -1, fmt.Errorf("fd keeper at %s: %s: %w", c.Path, req.Op, err)
	}
	buf := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(maxFds*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return answer{}, -1, fmt.Errorf("fd keeper at %s: %s: %w", c.Path, req.Op, err)
	}
	fds, err := parseRights(oob[:oobn])
	fd := -1
	if len(fds) > 0 {
		fd = fds[0]
		for _, extra := range fds[1:] {
			unix.Close(extra)
		}
	}
	var ans answer
	if jerr := json.Unmarshal(buf[:n], &ans); jerr != nil || err != nil {
		closeIf(fd)
		return answer{}, -1, fmt.Errorf("fd keeper at %s: %s: unreadable answer: %v %v", c.Path, req.Op, jerr, err)
	}
	switch ans.Code {
	case "":
		return ans, fd, nil
	case codeNotFound:
		closeIf(fd)
		return ans, -1, fmt.Errorf("fd keeper: %s: %w", ans.Error, ErrNotFound)
	case codeBadRequest:
		closeIf(fd)
		return ans, -1, fmt.Errorf("fd keeper: %s: %w", ans.Error, ErrBadRequest)
	}
	closeIf(fd)
	return ans, -1, fmt.Errorf("fd keeper: %s (%s)", ans.Error, ans.Code)
}

func closeIf(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}
