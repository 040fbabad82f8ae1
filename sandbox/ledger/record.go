package ledger

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrBadRecord: a records or ledger line that does not parse.
var ErrBadRecord = errors.New("bad ledger record")

// recordMagic starts every record line (format version 1).
const recordMagic = "vr1"

// Record is one record a writer appended to its pod's volume.
type Record struct {
	PodUID string
	Node   string
	Seq    uint64
	// Time is the writer's clock just before the write.
	Time time.Time
}

// RecordsFile is the name of the records file of a pod at the root of its volume.
func RecordsFile(podUID string) string { return "records-" + podUID + ".log" }

// Line is r as written to the volume, newline included.
func (r Record) Line() []byte {
	body := fmt.Sprintf("%s %s %s %d %d", recordMagic, r.PodUID, r.Node, r.Seq, r.Time.UnixNano())
	return fmt.Appendf(nil, "%s %08x\n", body, crc32.ChecksumIEEE([]byte(body)))
}

// validName: pod UIDs and node names are non-empty and hold no space.
func validName(s string) bool { return s != "" && !strings.ContainsAny(s, " \n\x00") && len(s) <= 253 }

// ParseRecord parses one line (without its newline).
func ParseRecord(line []byte) (Record, error) {
	f := strings.Fields(string(line))
	if len(f) != 6 || f[0] != recordMagic {
		return Record{}, fmt.Errorf("%w: %q: want %q POD-UID NODE SEQ UNIX-NANOS CRC", ErrBadRecord, line, recordMagic)
	}
	body := strings.Join(f[:5], " ")
	crc, err := strconv.ParseUint(f[5], 16, 32)
	if err != nil || uint32(crc) != crc32.ChecksumIEEE([]byte(body)) {
		return Record{}, fmt.Errorf("%w: %q: checksum mismatch", ErrBadRecord, line)
	}
	seq, err1 := strconv.ParseUint(f[3], 10, 64)
	ns, err2 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || !validName(f[1]) || !validName(f[2]) {
		return Record{}, fmt.Errorf("%w: %q: bad field", ErrBadRecord, line)
	}
	return Record{PodUID: f[1], Node: f[2], Seq: seq, Time: time.Unix(0, ns)}, nil
}

// Records is what a records file holds: the records that parse, and the count
// of lines that do not (torn tails, zeroed blocks).
type Records struct {
	Records []Record
	Garbled int
}

// ParseRecords splits data into lines and parses each; NUL bytes (blocks a
// crash left zeroed) end a line like a newline does.
func ParseRecords(data []byte) Records {
	var out Records
	for _, chunk := range bytes.FieldsFunc(data, func(r rune) bool { return r == '\n' || r == 0 }) {
		r, err := ParseRecord(chunk)
		if err != nil {
			out.Garbled++
			continue
		}
		out.Records = append(out.Records, r)
	}
	return out
}

// ReadRecords reads and parses a records file with O_DIRECT, so that on a
// mount of a Vigil volume the data comes from the datapath, not from the page
// cache of the node that wrote it.
func ReadRecords(path string) (Records, error) {
	b, err := ReadFileDirect(path)
	if err != nil {
		return Records{}, err
	}
	return ParseRecords(b), nil
}

// directAlign is the alignment O_DIRECT needs of buffers, offsets and lengths
// (4 KiB covers every logical block size in use).
const directAlign = 4096

// ReadFileDirect reads the whole file at path with O_DIRECT (bypassing the page
// cache); where the filesystem refuses O_DIRECT it reads normally.
func ReadFileDirect(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EINVAL) {
		return os.ReadFile(path)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	const chunk = 1 << 20
	raw := make([]byte, chunk+directAlign)
	shift := (directAlign - int(uintptr(unsafe.Pointer(&raw[0]))%directAlign)) % directAlign
	buf := raw[shift : shift+chunk]
	var out []byte
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		out = append(out, buf[:n]...)
		if n < len(buf) {
			return out, nil
		}
	}
}

// Ack is one line of a ledger: a record acknowledged by fsync.
type Ack struct {
	Seq  uint64
	Time time.Time
}

// Line is a as written to the ledger, newline included.
func (a Ack) Line() []byte { return fmt.Appendf(nil, "%d %d\n", a.Seq, a.Time.UnixNano()) }

// ReadLedger reads a ledger file. A last line without its newline (a writer
// killed in the middle of appending it) is ignored; any other bad line is an
// error.
func ReadLedger(path string) ([]Ack, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseLedger(f, path)
}

func parseLedger(r io.Reader, name string) ([]Ack, error) {
	br := bufio.NewReader(r)
	var out []Ack
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadString('\n')
		if err == io.EOF {
			return out, nil // a partial last line is an append cut short
		}
		if err != nil {
			return nil, err
		}
		a, err := parseAck(line)
		if err != nil {
			return nil, fmt.Errorf("%w: %s line %d: %q: want SEQ UNIX-NANOS", ErrBadRecord, name, lineNo, strings.TrimSpace(line))
		}
		out = append(out, a)
	}
}

// parseAck parses one ledger line, "SEQ UNIX-NANOS", its newline optional.
func parseAck(line string) (Ack, error) {
	f := strings.Fields(line)
	if len(f) != 2 {
		return Ack{}, ErrBadRecord
	}
	seq, err1 := strconv.ParseUint(f[0], 10, 64)
	ns, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return Ack{}, ErrBadRecord
	}
	return Ack{Seq: seq, Time: time.Unix(0, ns)}, nil
}
