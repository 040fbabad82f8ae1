package wire

import (
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/mem"
)

// CodecName is the gRPC content-subtype of the datapath codec.
const CodecName = "vigil-dp"

// ServiceName is the gRPC service name; the version is part of it.
const ServiceName = "vigil.datapath.v1.Datapath"

// Method names, without the service prefix.
const (
	MethodCreateVolume = "CreateVolume"
	MethodDeleteVolume = "DeleteVolume"
	MethodGetVolume    = "GetVolume"
	MethodListVolumes  = "ListVolumes"
	MethodCapacity     = "Capacity"
	MethodGrant        = "Grant"
	MethodFence        = "Fence"
	MethodRelease      = "Release"
	MethodAttachments  = "Attachments"
	// MethodWrite is a write under a write session's generation
	// (WriteRequest.Gen), ordered like the bulk channel's writes. Releases
	// before write sessions on gRPC called an unordered "Write", which this
	// server does not serve: such a client gets Unimplemented, and a current
	// client meeting an old server gets Unimplemented for
	// MethodOpenWriteSession and writes nothing.
	MethodWrite = "SessionWrite"
	// MethodOpenWriteSession opens a new generation of a (volume, node,
	// epoch)'s write session, as the bulk channel's session request does.
	MethodOpenWriteSession = "OpenWriteSession"
	MethodRead             = "Read"
	MethodFlush            = "Flush"
	MethodHeartbeat        = "Heartbeat"
	MethodConnectivity     = "Connectivity"
	MethodNodeGrants       = "NodeGrants"
	MethodFenceNode        = "FenceNode"
	MethodLeave            = "Leave"
	MethodNodes            = "Nodes"
	// MethodFailedVolumes lists the volumes whose flush failed.
	MethodFailedVolumes = "FailedVolumes"
	// MethodClearFailure ends a volume's failure after an operator checked it.
	MethodClearFailure = "ClearFailure"
	// MethodServers reports the control group's servers as the server
	// asked sees them.
	MethodServers = "Servers"
	// MethodGroupVolumes reports every volume of the control group with
	// the server holding its data and its epoch, as the server asked
	// applied them.
	MethodGroupVolumes = "GroupVolumes"
)

// FullMethod returns "/service/method" as gRPC invokes it.
func FullMethod(m string) string { return "/" + ServiceName + "/" + m }

// payloader is a message whose large byte field is sent after a header without
// being copied into the header's buffer.
type payloader interface {
	Header(b []byte) []byte
	Payload() []byte
}

// Codec is the gRPC codec for Message values. It implements encoding.CodecV2.
type Codec struct{}

// Name implements encoding.CodecV2.
func (Codec) Name() string { return CodecName }

// Marshal implements encoding.CodecV2. A WriteRequest's payload is referenced,
// not copied; gRPC releases it when the transport is done with it, which may be
// after Invoke returns if the call failed, so the client waits for that
// (WriteRequest.WaitReleased) before giving the caller its buffer back. Other
// payloads (a read's answer on the server) are fresh slices nobody reuses.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(*WriteRequest); ok {
		h := w.Header(make([]byte, 0, 64))
		data := w.Data[:len(w.Data):len(w.Data)]
		if mem.IsBelowBufferPoolingThreshold(len(data)) {
			// Too small for gRPC to track its release: copy it instead.
			return mem.BufferSlice{mem.SliceBuffer(w.Trailer(append(h, data...)))}, nil
		}
		pool := &releasePool{done: make(chan struct{})}
		w.released = append(w.released, pool.done)
		out := mem.BufferSlice{mem.SliceBuffer(h), mem.NewBuffer(&data, pool)}
		if t := w.Trailer(nil); len(t) > 0 {
			out = append(out, mem.SliceBuffer(t))
		}
		return out, nil
	}
	if p, ok := v.(payloader); ok {
		h := p.Header(make([]byte, 0, 64))
		if len(p.Payload()) == 0 {
			return mem.BufferSlice{mem.SliceBuffer(h)}, nil
		}
		return mem.BufferSlice{mem.SliceBuffer(h), mem.SliceBuffer(p.Payload())}, nil
	}
	m, ok := v.(Message)
	if !ok {
		return nil, fmt.Errorf("wire: cannot marshal %T: not a wire.Message", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(m.MarshalAppend(nil))}, nil
}

// releasePool is the mem.BufferPool of one write payload: gRPC "returns" the
// payload to it when the last reference is freed, which tells the client the
// caller's buffer is no longer read.
type releasePool struct {
	once sync.Once
	done chan struct{}
}

func (p *releasePool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (p *releasePool) Put(*[]byte)       { p.once.Do(func() { close(p.done) }) }

// Unmarshal implements encoding.CodecV2. A Frame takes a reference to the
// received buffers; any other message decodes from one fresh copy, which it
// may alias.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*Frame); ok {
		data.Ref()
		f.Bufs = data
		return nil
	}
	m, ok := v.(Message)
	if !ok {
		return fmt.Errorf("wire: cannot unmarshal into %T: not a wire.Message", v)
	}
	return m.Unmarshal(data.Materialize())
}

// Frame is an undecoded message: the server receives every request as a Frame
// and decodes it itself, so that a malformed request gets InvalidArgument with
// the decoder's explanation (gRPC would turn a codec failure into Internal), and
// so that a write's payload can go from gRPC's receive buffers to the volume
// file without being copied (see WriteVectors). The holder calls Free.
type Frame struct{ Bufs mem.BufferSlice }

// MarshalAppend appends the frame's bytes.
func (f *Frame) MarshalAppend(b []byte) []byte {
	for _, buf := range f.Bufs {
		b = append(b, buf.ReadOnlyData()...)
	}
	return b
}

// Unmarshal makes the frame hold b (not copied).
func (f *Frame) Unmarshal(b []byte) error { f.Bufs = mem.BufferSlice{mem.SliceBuffer(b)}; return nil }

// Bytes returns the frame as one slice (a copy unless it is a single buffer).
func (f *Frame) Bytes() []byte {
	if len(f.Bufs) == 1 {
		return f.Bufs[0].ReadOnlyData()
	}
	return f.Bufs.Materialize()
}

// Free returns the frame's buffers to gRPC's pool; the frame is empty after.
func (f *Frame) Free() {
	f.Bufs.Free()
	f.Bufs = nil
}

// maxWriteHeader bounds the encoded header of a WriteRequest: two strings of at
// most MaxString bytes and four varints (epoch, generation, offset, length).
const maxWriteHeader = 2*(MaxString+binaryMaxVarint) + 4*binaryMaxVarint

const binaryMaxVarint = 10

// DecodeWrite decodes a WriteRequest frame without copying its payload: it
// returns the request with Data nil and the payload as slices of the frame's
// buffers, valid until Free.
func (f *Frame) DecodeWrite() (WriteRequest, [][]byte, error) {
	total := f.Bufs.Len()
	head := make([]byte, min(total, maxWriteHeader))
	f.Bufs.CopyTo(head)
	var m WriteRequest
	d := decoder{b: head}
	m.IOTarget.dec(&d)
	m.Gen = d.u64("gen")
	m.Offset = d.i64("offset")
	n := d.u64("data")
	if d.err == nil && n > MaxBytes {
		d.fail("data", "length %d over the limit of %d", n, MaxBytes)
	}
	hlen := len(head) - len(d.b)
	if d.err == nil && uint64(total-hlen) < n {
		d.fail("data", "length %d but %d bytes follow", n, total-hlen)
	}
	if d.err == nil && uint64(total-hlen) > n+binaryMaxVarint {
		d.fail("data", "length %d but %d bytes follow; only the member epoch may follow the data", n, total-hlen)
	}
	if d.err != nil {
		return WriteRequest{}, nil, fmt.Errorf("WriteRequest: %w", d.err)
	}
	end := hlen + int(n)
	if end < total {
		tail := make([]byte, total-end)
		f.tail(end, tail)
		t := decoder{b: tail}
		m.MemberEpoch = decMemberEpoch(&t)
		if err := t.finish("WriteRequest"); err != nil {
			return WriteRequest{}, nil, err
		}
	}
	return m, f.slices(hlen, end), nil
}

// slices returns the frame's bytes [from, to) as slices of its buffers.
func (f *Frame) slices(from, to int) [][]byte {
	var iov [][]byte
	pos := 0
	for _, buf := range f.Bufs {
		p := buf.ReadOnlyData()
		lo, hi := max(from-pos, 0), min(to-pos, len(p))
		pos += len(p)
		if lo < hi {
			iov = append(iov, p[lo:hi])
		}
	}
	return iov
}

// tail copies the frame's bytes from `from` into p.
func (f *Frame) tail(from int, p []byte) {
	for _, q := range f.slices(from, from+len(p)) {
		p = p[copy(p, q):]
	}
}

// WaitReleased waits until gRPC has let go of the payload of every attempt to
// send m, or until max has passed; it reports whether all were released.
func (m *WriteRequest) WaitReleased(max time.Duration) bool {
	if len(m.released) == 0 {
		return true
	}
	t := time.NewTimer(max)
	defer t.Stop()
	for _, ch := range m.released {
		select {
		case <-ch:
		case <-t.C:
			return false
		}
	}
	return true
}
