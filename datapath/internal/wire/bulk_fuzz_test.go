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
	f.Add(AppendBulkRequest(nil, 1, 7, 4096, "vol-0123456789abcdef", "node-a", 1<<20))
	f.Add(AppendBulkRequest(nil, 2, 1, 0, "v", "n", BulkMaxData+1))
	f.Add(AppendBulkResponse(nil, 3, 3, "datapath: fenced"))
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
				again := AppendBulkRequest(nil, r.ID, r.Epoch, r.Offset, string(make([]byte, r.VolLen)), string(make([]byte, r.NodeLen)), r.DataLen)
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
				again := AppendBulkResponse(nil, r.ID, r.Code, string(make([]byte, r.MsgLen)))
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
	good := AppendBulkRequest(nil, 1, 1, 0, "v", "n", 10)[:BulkRequestHeaderLen]
	if _, err := DecodeBulkRequest(good); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(h []byte){
		"op":       func(h []byte) { h[0] = 9 },
		"reserved": func(h []byte) { h[13] = 1 },
		"no vol":   func(h []byte) { h[2], h[3] = 0, 0 },
		"long vol": func(h []byte) { h[2], h[3] = 0xff, 0xff },
		"no node":  func(h []byte) { h[4], h[5] = 0, 0 },
		"oversize": func(h []byte) { h[8], h[9], h[10], h[11] = 1, 0, 0x40, 0 },
		"id 0":     func(h []byte) { clear(h[16:24]) },
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
}
