package wire

import (
	"fmt"

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
	MethodWrite        = "Write"
	MethodRead         = "Read"
	MethodFlush        = "Flush"
	MethodHeartbeat    = "Heartbeat"
	MethodConnectivity = "Connectivity"
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

// Marshal implements encoding.CodecV2. Payload bytes are referenced, not copied:
// gRPC finishes with them before Invoke (or the handler's send) returns.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
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

// Unmarshal implements encoding.CodecV2. The data is copied into one fresh slice
// that the decoded message may alias.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(Message)
	if !ok {
		return fmt.Errorf("wire: cannot unmarshal into %T: not a wire.Message", v)
	}
	return m.Unmarshal(data.Materialize())
}

// Frame is an undecoded message: the server receives every request as a Frame
// and decodes it itself, so that a malformed request gets InvalidArgument with
// the decoder's explanation (gRPC would turn a codec failure into Internal).
type Frame struct{ B []byte }

// MarshalAppend appends the frame's bytes verbatim.
func (f *Frame) MarshalAppend(b []byte) []byte { return append(b, f.B...) }

// Unmarshal keeps b (which the codec has already copied) as it is.
func (f *Frame) Unmarshal(b []byte) error { f.B = b; return nil }
