package wire

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeBulk feeds arbitrary bytes to the bulk frame decoders: each must
// either fail with ErrMalformed or accept a header that encodes back to the
// same bytes (so no two encodings mean the same frame) and respects the limits.
func FuzzDecodeBulk(f *testing.F) {
	f.Add(AppendBulkRequest(nil, BulkRequest{Op: BulkOpWrite, ID: 1, Epoch: 7, Offset: 4096, Gen: 9, DataLen: 1 << 20}, "vol-0123456789abcdef", "node-a"))
	f.Add(AppendBulkRequest(nil, BulkRequest{Op: BulkOpWrite, ID: 2, Epoch: 1, Gen: 1, DataLen: BulkMaxData + 1}, "v", "n"))
	f.Add(AppendBulkRequest(nil, BulkRequest{Op: BulkOpSession, ID: 4, Epoch: 7}, "vol-0123456789abcdef", "node-a"))
	f.Add(AppendBulkRequest(nil, BulkRequest{Op: BulkOpWrite, ID: 5, Epoch: 7, Gen: 2, DataLen: 4, MemberEpoch: 3}, "v", "n"))
	f.Add(AppendBulkRequest(nil, BulkRequest{Op: BulkOpWrite, ID: 6, Epoch: 7, Gen: 2, DataLen: 4, MemberEpoch: 1 << 31}, "v", "n"))
	f.Add(AppendBulkResponse(nil, 3, 3, 0, "datapath: fenced"))
	f.Add(AppendBulkResponse(nil, 4, 0, 1<<62, ""))
	f.Add(AppendBulkHello(nil, "token"))
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) >= BulkRequestHeaderLen {
			h := data[:BulkRequestHeaderLen]
			r, err := DecodeBulkRequest(h)
			switch {
			case err != nil && !errors.Is(err, ErrMalformed):
				t.Fatalf("request error %v does not wrap ErrMalformed", err)
			case err == nil:
				if r.VolLen < 1 || r.VolLen > BulkMaxName || r.NodeLen < 1 || r.NodeLen > BulkMaxName || r.DataLen > BulkMaxData || r.ID == 0 {
					t.Fatalf("accepted a header outside the limits: %+v", r)
				}
				if r.MemberEpoch > MaxMemberEpoch {
					t.Fatalf("accepted a negative member epoch: %+v", r)
				}
				if (r.Op == BulkOpWrite && r.Gen == 0) || (r.Op == BulkOpSession && (r.Gen != 0 || r.DataLen != 0 || r.Offset != 0 || r.MemberEpoch != 0)) {
					t.Fatalf("accepted a %d op with a generation, payload or offset it cannot carry: %+v", r.Op, r)
				}
				again := AppendBulkRequest(nil, r, string(make([]byte, r.VolLen)), string(make([]byte, r.NodeLen)))
				if !bytes.Equal(again[:BulkRequestHeaderLen], h) {
					t.Fatalf("request header does not round-trip:\n%x\n%x", h, again[:BulkRequestHeaderLen])
				}
			}
		}
		if len(data) >= BulkResponseHeaderLen {
			h := data[:BulkResponseHeaderLen]
			r, err := DecodeBulkResponse(h)
			switch {
			case err != nil && !errors.Is(err, ErrMalformed):
				t.Fatalf("response error %v does not wrap ErrMalformed", err)
			case err == nil:
				again := AppendBulkResponse(nil, r.ID, r.Code, r.Gen, string(make([]byte, r.MsgLen)))
				if !bytes.Equal(again[:BulkResponseHeaderLen], h) {
					t.Fatalf("response header does not round-trip:\n%x\n%x", h, again[:BulkResponseHeaderLen])
				}
			}
		}
		if len(data) >= 2 {
			n, err := BulkHelloTokenLen([2]byte{data[0], data[1]})
			if err == nil && (n < 1 || n > BulkMaxToken) {
				t.Fatalf("accepted token length %d", n)
			}
		}
		if _, err := DecodeBulkRequest(data); len(data) != BulkRequestHeaderLen && err == nil {
			t.Fatalf("accepted a %d-byte request header", len(data))
		}
	})
}

func TestDecodeBulkRequest_RejectsBadHeaders(t *testing.T) {
	good := AppendBulkRequest(nil, BulkRequest{Op: BulkOpWrite, ID: 1, Epoch: 1, Gen: 1, DataLen: 10}, "v", "n")[:BulkRequestHeaderLen]
	if _, err := DecodeBulkRequest(good); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(h []byte){
		"op":                   func(h []byte) { h[0] = 9 },
		"reserved":             func(h []byte) { h[6] = 1 },
		"no vol":               func(h []byte) { h[2], h[3] = 0, 0 },
		"long vol":             func(h []byte) { h[2], h[3] = 0xff, 0xff },
		"no node":              func(h []byte) { h[4], h[5] = 0, 0 },
		"oversize":             func(h []byte) { h[8], h[9], h[10], h[11] = 1, 0, 0x40, 0 },
		"id 0":                 func(h []byte) { clear(h[16:24]) },
		"gen 0":                func(h []byte) { clear(h[40:48]) },
		"session with payload": func(h []byte) { h[0] = BulkOpSession; clear(h[40:48]) },
		"session with gen":     func(h []byte) { h[0] = BulkOpSession; clear(h[8:12]) },
	}
	for name, mutate := range bad {
		h := bytes.Clone(good)
		mutate(h)
		if _, err := DecodeBulkRequest(h); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := DecodeBulkRequest(good[:10]); !errors.Is(err, ErrMalformed) {
		t.Errorf("short header: %v", err)
	}
	session := AppendBulkRequest(nil, BulkRequest{Op: BulkOpSession, ID: 2, Epoch: 3}, "v", "n")[:BulkRequestHeaderLen]
	if r, err := DecodeBulkRequest(session); err != nil || r.Op != BulkOpSession || r.Epoch != 3 {
		t.Errorf("session request: %+v, %v", r, err)
	}
}

// A version 1 client reads a 16-byte header: the refusal of its hello must
// decode there as id 0, the code and the whole message.
func TestAppendBulkRefusalV1_IsVersion1Layout(t *testing.T) {
	msg := "bulk protocol VGLBULK1 is not served"
	b := AppendBulkRefusalV1(nil, 7, msg)
	if len(b) != 16+len(msg) || b[8] != 7 || int(b[10])|int(b[11])<<8 != len(msg) || string(b[16:]) != msg {
		t.Fatalf("refusal = %x", b)
	}
	if !bytes.Equal(b[:8], make([]byte, 8)) || b[9] != 0 || !bytes.Equal(b[12:16], make([]byte, 4)) {
		t.Fatalf("refusal header has a non-zero id or reserved byte: %x", b[:16])
	}
}
