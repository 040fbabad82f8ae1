package wire

import (
	"encoding/binary"
	"fmt"
)

// The bulk channel is a plain TCP connection beside gRPC that carries writes
// with a fixed binary framing, so a 1 MiB write costs a socket copy and a
// pwrite instead of HTTP/2 framing. It shares the gRPC listener: the server
// reads the first BulkMagicLen bytes of every connection and hands the
// connection to gRPC unless they are BulkMagic (an HTTP/2 client preface starts
// "PRI * HT").
//
//	client hello:  BulkMagic, u16 token length, token
//	server hello:  a response with id 0 (code 0: accepted, the message the boot id
//	               of the server's machine or empty; else refused and closed)
//	request:       BulkRequestHeaderLen bytes (see BulkRequest), volume id, node, data
//	               (a write carries the member epoch of the volume's replica set
//	               its writer holds; 0 for a single copy)
//	response:      BulkResponseHeaderLen bytes (see BulkResponse), message
//
// All integers are little-endian. Requests carry ids chosen by the client, so
// several can be in flight on one connection; responses may come in any order.
//
// Writes are ordered by write sessions: a BulkOpSession request opens a new
// generation for (volume, node, epoch), answered in the response's Gen, and
// every write carries the generation it was sent under. The server applies a
// write only under the generation opened last, so a client that gave up on a
// write opens a new generation before it sends anything else, and the old write,
// however late it arrives, is refused.
const (
	// BulkMagic opens a bulk connection (version 2: write sessions).
	BulkMagic = "VGLBULK2"
	// BulkMagicV1 opened a bulk connection of version 1 (no write sessions).
	// The server answers it with a refusal in version 1's response layout
	// (AppendBulkRefusalV1) and closes the connection.
	BulkMagicV1 = "VGLBULK1"
	// BulkMagicLen is how many bytes the server reads to tell bulk from gRPC.
	BulkMagicLen = len(BulkMagic)
	// BulkALPN is the bulk channel's TLS application protocol name; gRPC
	// negotiates "h2" on the same port. It names the channel, not its version
	// (the magic does).
	BulkALPN = "vigil-bulk/1"
	// BulkMaxToken is the longest token a hello may carry.
	BulkMaxToken = 4096
	// BulkMaxData is the largest payload of one request (datapath.MaxIOSize).
	BulkMaxData = 4 << 20
	// BulkMaxName is the longest volume id or node name in a request.
	BulkMaxName = 256
	// BulkMaxMessage is the longest error message in a response.
	BulkMaxMessage = 4096
	// BulkRequestHeaderLen is the fixed part of a request.
	BulkRequestHeaderLen = 48
	// BulkResponseHeaderLen is the fixed part of a response.
	BulkResponseHeaderLen = 24
	// bulkResponseHeaderLenV1 is the fixed part of a version 1 response.
	bulkResponseHeaderLenV1 = 16
)

// Bulk operations.
const (
	// BulkOpWrite writes the payload at Offset under (Epoch, Gen).
	BulkOpWrite uint8 = 1
	// BulkOpSession opens a new write session generation for (volume, node,
	// Epoch), answered in the response's Gen; it carries no payload, offset or
	// generation.
	BulkOpSession uint8 = 2
)

// BulkRequest is the fixed header of a bulk request. Its layout (48 bytes):
// op u8, reserved u8, volume id length u16, node length u16, reserved u16,
// payload length u32, member epoch u32, id u64, epoch u64, offset i64, gen u64.
//
// The member epoch took 4 bytes that were reserved and had to be zero, so a
// request of a client from before member epochs is a write at member epoch
// 0 (a single copy), and a server from before refuses a write at any other
// as malformed instead of writing it unchecked. Its top bit stays clear: a
// value from MaxMemberEpoch+1 up is refused as negative.
type BulkRequest struct {
	Op          uint8
	VolLen      int
	NodeLen     int
	DataLen     int
	MemberEpoch uint64
	ID          uint64
	Epoch       uint64
	Offset      int64
	Gen         uint64
}

// MaxMemberEpoch is the highest member epoch either channel carries (a
// non-negative int32, so the bulk header's field fits it); a change of a
// replica set moves the member epoch by one.
const MaxMemberEpoch = 1<<31 - 1

// CheckMemberEpoch refuses a member epoch above MaxMemberEpoch, which
// neither channel can carry.
func CheckMemberEpoch(m uint64) error {
	if m > MaxMemberEpoch {
		return fmt.Errorf("member epoch %d cannot be sent: allowed are 0 to %d", m, MaxMemberEpoch)
	}
	return nil
}

// AppendBulkHello appends a client hello carrying token.
func AppendBulkHello(b []byte, token string) []byte {
	b = append(b, BulkMagic...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(token)))
	return append(b, token...)
}

// BulkHelloTokenLen decodes the token length that follows the magic.
func BulkHelloTokenLen(b [2]byte) (int, error) {
	n := int(binary.LittleEndian.Uint16(b[:]))
	if n == 0 || n > BulkMaxToken {
		return 0, fmt.Errorf("%w: bulk hello: token length %d, allowed are 1 to %d", ErrMalformed, n, BulkMaxToken)
	}
	return n, nil
}

// AppendBulkRequest appends the header r (its MemberEpoch at most
// MaxMemberEpoch: the caller checks, see CheckMemberEpoch) (its VolLen and NodeLen are taken
// from volumeID and node) followed by the volume id and the node; a write's
// payload follows separately, so it need not be copied.
func AppendBulkRequest(b []byte, r BulkRequest, volumeID, node string) []byte {
	var h [BulkRequestHeaderLen]byte
	h[0] = r.Op
	binary.LittleEndian.PutUint16(h[2:], uint16(len(volumeID)))
	binary.LittleEndian.PutUint16(h[4:], uint16(len(node)))
	binary.LittleEndian.PutUint32(h[8:], uint32(r.DataLen))
	binary.LittleEndian.PutUint32(h[12:], uint32(r.MemberEpoch))
	binary.LittleEndian.PutUint64(h[16:], r.ID)
	binary.LittleEndian.PutUint64(h[24:], r.Epoch)
	binary.LittleEndian.PutUint64(h[32:], uint64(r.Offset))
	binary.LittleEndian.PutUint64(h[40:], r.Gen)
	b = append(b, h[:]...)
	b = append(b, volumeID...)
	return append(b, node...)
}

// DecodeBulkRequest decodes and checks a request header: a known op, reserved
// bytes zero, non-empty names within BulkMaxName, a payload within
// BulkMaxData; a write carries a generation, a session request nothing but
// its names and epoch. It allocates nothing, so a bad header costs nothing but
// the error.
func DecodeBulkRequest(h []byte) (BulkRequest, error) {
	if len(h) != BulkRequestHeaderLen {
		return BulkRequest{}, fmt.Errorf("%w: bulk request header is %d bytes, want %d", ErrMalformed, len(h), BulkRequestHeaderLen)
	}
	r := BulkRequest{
		Op:          h[0],
		VolLen:      int(binary.LittleEndian.Uint16(h[2:])),
		NodeLen:     int(binary.LittleEndian.Uint16(h[4:])),
		DataLen:     int(binary.LittleEndian.Uint32(h[8:])),
		MemberEpoch: uint64(binary.LittleEndian.Uint32(h[12:])),
		ID:          binary.LittleEndian.Uint64(h[16:]),
		Epoch:       binary.LittleEndian.Uint64(h[24:]),
		Offset:      int64(binary.LittleEndian.Uint64(h[32:])),
		Gen:         binary.LittleEndian.Uint64(h[40:]),
	}
	switch {
	case r.Op != BulkOpWrite && r.Op != BulkOpSession:
		return r, fmt.Errorf("%w: bulk request op %d; the ops are %d (write) and %d (open a write session)", ErrMalformed, r.Op, BulkOpWrite, BulkOpSession)
	case h[1] != 0 || h[6] != 0 || h[7] != 0:
		return r, fmt.Errorf("%w: bulk request: reserved header bytes must be zero", ErrMalformed)
	case r.MemberEpoch > MaxMemberEpoch:
		return r, fmt.Errorf("%w: bulk request: member epoch field 0x%08x is negative; allowed are 0 to %d", ErrMalformed, r.MemberEpoch, MaxMemberEpoch)
	case r.VolLen == 0 || r.VolLen > BulkMaxName:
		return r, fmt.Errorf("%w: bulk request: volume id length %d, allowed are 1 to %d", ErrMalformed, r.VolLen, BulkMaxName)
	case r.NodeLen == 0 || r.NodeLen > BulkMaxName:
		return r, fmt.Errorf("%w: bulk request: node length %d, allowed are 1 to %d", ErrMalformed, r.NodeLen, BulkMaxName)
	case r.DataLen > BulkMaxData:
		return r, fmt.Errorf("%w: bulk request: payload %d bytes, at most %d allowed", ErrMalformed, r.DataLen, BulkMaxData)
	case r.ID == 0:
		return r, fmt.Errorf("%w: bulk request id 0 is reserved for the hello", ErrMalformed)
	case r.Op == BulkOpWrite && r.Gen == 0:
		return r, fmt.Errorf("%w: bulk write: generation 0; a write carries the generation of an open write session (op %d)", ErrMalformed, BulkOpSession)
	case r.Op == BulkOpSession && (r.DataLen != 0 || r.Offset != 0 || r.Gen != 0 || r.MemberEpoch != 0):
		return r, fmt.Errorf("%w: bulk session request: payload, offset, generation and member epoch must be zero", ErrMalformed)
	}
	return r, nil
}

// BulkResponse is a decoded response header. Its layout (24 bytes): id u64,
// code u8, reserved u8, message length u16, reserved u32, gen u64 (the
// generation a session request opened; 0 in every other response).
type BulkResponse struct {
	ID     uint64
	Code   uint8
	MsgLen int
	Gen    uint64
}

// AppendBulkResponse appends a response; msg is cut to BulkMaxMessage bytes.
func AppendBulkResponse(b []byte, id uint64, code uint8, gen uint64, msg string) []byte {
	if len(msg) > BulkMaxMessage {
		msg = msg[:BulkMaxMessage]
	}
	var h [BulkResponseHeaderLen]byte
	binary.LittleEndian.PutUint64(h[0:], id)
	h[8] = code
	binary.LittleEndian.PutUint16(h[10:], uint16(len(msg)))
	binary.LittleEndian.PutUint64(h[16:], gen)
	b = append(b, h[:]...)
	return append(b, msg...)
}

// AppendBulkRefusalV1 appends the refusal of a version 1 hello in version 1's
// response layout (16 bytes: id 0, code, message length), so that a client of
// that version shows msg instead of failing to decode the answer.
func AppendBulkRefusalV1(b []byte, code uint8, msg string) []byte {
	if len(msg) > BulkMaxMessage {
		msg = msg[:BulkMaxMessage]
	}
	var h [bulkResponseHeaderLenV1]byte
	h[8] = code
	binary.LittleEndian.PutUint16(h[10:], uint16(len(msg)))
	b = append(b, h[:]...)
	return append(b, msg...)
}

// DecodeBulkResponse decodes and checks a response header.
func DecodeBulkResponse(h []byte) (BulkResponse, error) {
	if len(h) != BulkResponseHeaderLen {
		return BulkResponse{}, fmt.Errorf("%w: bulk response header is %d bytes, want %d", ErrMalformed, len(h), BulkResponseHeaderLen)
	}
	r := BulkResponse{
		ID:     binary.LittleEndian.Uint64(h[0:]),
		Code:   h[8],
		MsgLen: int(binary.LittleEndian.Uint16(h[10:])),
		Gen:    binary.LittleEndian.Uint64(h[16:]),
	}
	if h[9] != 0 || binary.LittleEndian.Uint32(h[12:]) != 0 {
		return r, fmt.Errorf("%w: bulk response: reserved header bytes must be zero", ErrMalformed)
	}
	if r.MsgLen > BulkMaxMessage {
		return r, fmt.Errorf("%w: bulk response: message %d bytes, at most %d allowed", ErrMalformed, r.MsgLen, BulkMaxMessage)
	}
	return r, nil
}
