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
//	server hello:  a response with id 0 (code 0: accepted; else refused and closed)
//	request:       BulkRequestHeaderLen bytes (see BulkRequest), volume id, node, data
//	response:      BulkResponseHeaderLen bytes (see BulkResponse), message
//
// All integers are little-endian. Requests carry ids chosen by the client, so
// several can be in flight on one connection; responses may come in any order.
const (
	// BulkMagic opens a bulk connection.
	BulkMagic = "VGLBULK1"
	// BulkMagicLen is how many bytes the server reads to tell bulk from gRPC.
	BulkMagicLen = len(BulkMagic)
	// BulkALPN is the bulk channel's TLS application protocol name; gRPC
	// negotiates "h2" on the same port.
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
	BulkRequestHeaderLen = 40
	// BulkResponseHeaderLen is the fixed part of a response.
	BulkResponseHeaderLen = 16
)

// BulkOpWrite is the only bulk operation: write Data at Offset.
const BulkOpWrite uint8 = 1

// BulkRequest is the fixed header of a bulk request.
type BulkRequest struct {
	Op      uint8
	VolLen  int
	NodeLen int
	DataLen int
	ID      uint64
	Epoch   uint64
	Offset  int64
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

// AppendBulkRequest appends a request header followed by the volume id and the
// node (the payload follows separately, so it need not be copied).
func AppendBulkRequest(b []byte, id, epoch uint64, off int64, volumeID, node string, dataLen int) []byte {
	var h [BulkRequestHeaderLen]byte
	h[0] = BulkOpWrite
	binary.LittleEndian.PutUint16(h[2:], uint16(len(volumeID)))
	binary.LittleEndian.PutUint16(h[4:], uint16(len(node)))
	binary.LittleEndian.PutUint32(h[8:], uint32(dataLen))
	binary.LittleEndian.PutUint64(h[16:], id)
	binary.LittleEndian.PutUint64(h[24:], epoch)
	binary.LittleEndian.PutUint64(h[32:], uint64(off))
	b = append(b, h[:]...)
	b = append(b, volumeID...)
	return append(b, node...)
}

// DecodeBulkRequest decodes and checks a request header: a known op, reserved
// bytes zero, non-empty names within BulkMaxName, a payload within BulkMaxData.
// It allocates nothing, so a bad header costs nothing but the error.
func DecodeBulkRequest(h []byte) (BulkRequest, error) {
	if len(h) != BulkRequestHeaderLen {
		return BulkRequest{}, fmt.Errorf("%w: bulk request header is %d bytes, want %d", ErrMalformed, len(h), BulkRequestHeaderLen)
	}
	r := BulkRequest{
		Op:      h[0],
		VolLen:  int(binary.LittleEndian.Uint16(h[2:])),
		NodeLen: int(binary.LittleEndian.Uint16(h[4:])),
		DataLen: int(binary.LittleEndian.Uint32(h[8:])),
		ID:      binary.LittleEndian.Uint64(h[16:]),
		Epoch:   binary.LittleEndian.Uint64(h[24:]),
		Offset:  int64(binary.LittleEndian.Uint64(h[32:])),
	}
	switch {
	case r.Op != BulkOpWrite:
		return r, fmt.Errorf("%w: bulk request op %d; the only op is %d (write)", ErrMalformed, r.Op, BulkOpWrite)
	case h[1] != 0 || h[6] != 0 || h[7] != 0 || binary.LittleEndian.Uint32(h[12:]) != 0:
		return r, fmt.Errorf("%w: bulk request: reserved header bytes must be zero", ErrMalformed)
	case r.VolLen == 0 || r.VolLen > BulkMaxName:
		return r, fmt.Errorf("%w: bulk request: volume id length %d, allowed are 1 to %d", ErrMalformed, r.VolLen, BulkMaxName)
	case r.NodeLen == 0 || r.NodeLen > BulkMaxName:
		return r, fmt.Errorf("%w: bulk request: node length %d, allowed are 1 to %d", ErrMalformed, r.NodeLen, BulkMaxName)
	case r.DataLen > BulkMaxData:
		return r, fmt.Errorf("%w: bulk request: payload %d bytes, at most %d allowed", ErrMalformed, r.DataLen, BulkMaxData)
	case r.ID == 0:
		return r, fmt.Errorf("%w: bulk request id 0 is reserved for the hello", ErrMalformed)
	}
	return r, nil
}

// BulkResponse is a decoded response header.
type BulkResponse struct {
	ID     uint64
	Code   uint8
	MsgLen int
}

// AppendBulkResponse appends a response; msg is cut to BulkMaxMessage bytes.
func AppendBulkResponse(b []byte, id uint64, code uint8, msg string) []byte {
	if len(msg) > BulkMaxMessage {
		msg = msg[:BulkMaxMessage]
	}
	var h [BulkResponseHeaderLen]byte
	binary.LittleEndian.PutUint64(h[0:], id)
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
	}
	if h[9] != 0 || binary.LittleEndian.Uint32(h[12:]) != 0 {
		return r, fmt.Errorf("%w: bulk response: reserved header bytes must be zero", ErrMalformed)
	}
	if r.MsgLen > BulkMaxMessage {
		return r, fmt.Errorf("%w: bulk response: message %d bytes, at most %d allowed", ErrMalformed, r.MsgLen, BulkMaxMessage)
	}
	return r, nil
}
