package datapathtest

import (
	"strconv"

	"golang.org/x/net/http2/hpack"
)

// h2Trailers reads the HTTP/2 frames a gRPC server sends, from the
// connection's first byte (the header compression's state spans the whole
// connection), and keeps each response's gRPC status sent after the proxy's
// release.
type h2Trailers struct {
	buf      []byte
	dec      *hpack.Decoder
	block    grpcStatus // the header block being decoded
	hasCode  bool
	recent   bool // the block arrived after the release
	statuses []grpcStatus
}

type grpcStatus struct {
	code uint32
	msg  string
}

func newH2Trailers() *h2Trailers {
	h := &h2Trailers{}
	h.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		switch f.Name {
		case "grpc-status":
			if c, err := strconv.ParseUint(f.Value, 10, 32); err == nil {
				h.block.code, h.hasCode = uint32(c), true
			}
		case "grpc-message":
			h.block.msg = f.Value
		}
	})
	return h
}

// HTTP/2 frame types and flags (RFC 9113, section 6).
const (
	h2FrameData         = 0x0
	h2FrameHeaders      = 0x1
	h2FrameContinuation = 0x9
	h2FlagEndStream     = 0x1
	h2FlagEndHeaders    = 0x4
	h2FlagPadded        = 0x8
	h2FlagPriority      = 0x20
)

// h2Frame splits the first whole HTTP/2 frame off b: its type, flags and
// payload, and the bytes after it; ok is false while b holds no whole frame.
func h2Frame(b []byte) (typ, flags byte, payload, rest []byte, ok bool) {
	const header = 9
	if len(b) < header {
		return 0, 0, nil, b, false
	}
	n := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
	if len(b) < header+n {
		return 0, 0, nil, b, false
	}
	return b[3], b[4], b[header : header+n], b[header+n:], true
}

// feed takes the next bytes the server sent; released says they came after
// the release.
func (h *h2Trailers) feed(p []byte, released bool) {
	h.buf = append(h.buf, p...)
	for {
		typ, flags, payload, rest, ok := h2Frame(h.buf)
		if !ok {
			return
		}
		switch typ {
		case h2FrameHeaders:
			if flags&h2FlagPadded != 0 && len(payload) > 0 {
				pad := int(payload[0])
				payload = payload[1:max(1, len(payload)-pad)]
			}
			if flags&h2FlagPriority != 0 && len(payload) >= 5 {
				payload = payload[5:]
			}
			h.block, h.hasCode, h.recent = grpcStatus{}, false, released
			h.header(payload, flags)
		case h2FrameContinuation:
			h.header(payload, flags)
		}
		h.buf = rest
	}
}

func (h *h2Trailers) header(fragment []byte, flags byte) {
	_, _ = h.dec.Write(fragment)
	if flags&h2FlagEndHeaders == 0 {
		return
	}
	_ = h.dec.Close()
	if h.hasCode && h.recent {
		h.statuses = append(h.statuses, h.block)
	}
}
