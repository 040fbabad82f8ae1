package csi

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FuzzSizeFor checks sizeFor's promise for any capacity range: either a size
// that is positive, aligned and inside the range, or InvalidArgument /
// OutOfRange.
func FuzzSizeFor(f *testing.F) {
	f.Add(int64(0), int64(0))
	f.Add(int64(1000), int64(0))
	f.Add(int64(5000), int64(6000))
	f.Add(int64(8192), int64(8192))
	f.Add(int64(-1), int64(10))
	f.Add(int64(1<<62), int64(0))
	f.Fuzz(func(t *testing.T, req, limit int64) {
		size, err := sizeFor(&csi.CapacityRange{RequiredBytes: req, LimitBytes: limit})
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.OutOfRange {
				t.Fatalf("sizeFor(%d, %d) error code %v: %v", req, limit, c, err)
			}
			return
		}
		switch {
		case size <= 0, size%SizeAlignment != 0:
			t.Fatalf("sizeFor(%d, %d) = %d: not a positive multiple of %d", req, limit, size, SizeAlignment)
		case size < req, limit > 0 && size > limit:
			t.Fatalf("sizeFor(%d, %d) = %d: outside the range", req, limit, size)
		}
	})
}

// FuzzDecodeToken checks that any starting token either decodes to the id it
// was made from or is refused with Aborted, and never panics.
func FuzzDecodeToken(f *testing.F) {
	f.Add("invalid-token")
	f.Add(encodeToken("vol-0000000000000001"))
	f.Add("")
	f.Fuzz(func(t *testing.T, token string) {
		id, err := decodeToken(token)
		if err != nil {
			if status.Code(err) != codes.Aborted {
				t.Fatalf("decodeToken(%q) error code %v", token, status.Code(err))
			}
			return
		}
		if token != "" && encodeToken(id) != token {
			t.Fatalf("decodeToken(%q) = %q, which encodes to %q", token, id, encodeToken(id))
		}
	})
}
