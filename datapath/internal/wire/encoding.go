package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed is returned for any message that does not decode.
var ErrMalformed = errors.New("malformed message")

// Limits applied while decoding, before any allocation.
const (
	// MaxString is the longest string field (names, ids, node names).
	MaxString = 4096
	// MaxBytes is the longest byte field (I/O payloads): 4 MiB plus slack so that
	// an oversize write reaches validation and gets a clear error there.
	MaxBytes = 4<<20 + 64<<10
	// MaxItems is the most elements in a repeated field.
	MaxItems = 1 << 20
)

type encoder struct{ b []byte }

func (e *encoder) u64(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) i64(v int64)  { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) boolean(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

// decoder reads fields in order; the first failure sticks and later reads are
// no-ops, so a message decoder checks err once at the end.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(field, format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: field %s: %s", ErrMalformed, field, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) u64(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(field, "bad unsigned varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) i64(field string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(field, "bad signed varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) length(field string, max int) int {
	n := d.u64(field)
	if d.err != nil {
		return 0
	}
	if n > uint64(max) {
		d.fail(field, "length %d over the limit of %d", n, max)
		return 0
	}
	if n > uint64(len(d.b)) {
		d.fail(field, "length %d but only %d bytes left", n, len(d.b))
		return 0
	}
	return int(n)
}

func (d *decoder) str(field string) string {
	n := d.length(field, MaxString)
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// bytes returns a sub-slice of the input (no copy): the caller owns the input.
func (d *decoder) bytes(field string) []byte {
	n := d.length(field, MaxBytes)
	if d.err != nil {
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) boolean(field string) bool {
	if d.err != nil {
		return false
	}
	if len(d.b) == 0 {
		d.fail(field, "missing")
		return false
	}
	v := d.b[0]
	d.b = d.b[1:]
	if v > 1 {
		d.fail(field, "bool byte %d is neither 0 nor 1", v)
	}
	return v == 1
}

func (d *decoder) count(field string) int {
	n := d.u64(field)
	if d.err != nil {
		return 0
	}
	// Every element takes at least one byte, which bounds allocation by input size.
	if n > MaxItems || n > uint64(len(d.b)) {
		d.fail(field, "count %d is more than the %d bytes left or the limit %d", n, len(d.b), MaxItems)
		return 0
	}
	return int(n)
}

func (d *decoder) finish(msg string) error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %s: %d trailing bytes", ErrMalformed, msg, len(d.b))
	}
	if d.err != nil && !errors.Is(d.err, ErrMalformed) {
		return fmt.Errorf("%w: %s: %v", ErrMalformed, msg, d.err)
	}
	if d.err != nil {
		return fmt.Errorf("%s: %w", msg, d.err)
	}
	return nil
}
