package datapath

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// The persisted form of a dirty-region map: one file per (volume, replica
// out of sync, member epoch the map started at), next to the volume's data
// file: volumes/<id>.dirty.<hex of the replica's server id>.<start epoch>.
//
// Block 0 is the header: a magic, the format version, the map's flags (all
// dirty), the region size, the volume's size, its id and the replica's, the
// member epoch the map started at and the one through which this server kept
// it (through: see dirtytrack.go), and a CRC-32C of the rest. Block i+1 holds
// chunk i: a tag, a CRC-32C of the chunk's index and bitmap, and the bitmap.
// A chunk no write touched is never written: the file is sparse, and an
// all-zero block reads as a clean chunk.
//
// Why a torn write never passes for "nothing dirty": marks only ever add
// bits, so a block's new content holds every bit of its old one. A block
// torn between old and new sectors has a tag and a checksum that do not
// match (an error, the whole map then taken as all dirty) unless it reads
// all zero, and it reads all zero only if its old content was all zero too
// (every sector of it zero in the old or the new content, and the new holds
// the old's bits and, in the first sector, the tag): nothing acknowledged is
// lost. A garbled header is an error too. openDirtyFile reports any of these
// as ErrDirtyMapCorrupt; the caller then treats the map as all dirty.
//
// A mark is durable before the write it covers is done: mark writes the
// changed chunks and fdatasyncs the file first, and only then shows the bits
// to Covers; a write whose regions are all dirty already (Covers) costs a
// read lock and no I/O.

// ErrDirtyMapCorrupt: a dirty-region map's file is torn or garbled; the map
// is taken as all dirty (a full copy), never as clean.
var ErrDirtyMapCorrupt = errors.New("datapath: dirty-region map file is torn or garbled")

const (
	dirtyMagic     = "VGLDIRTY"
	dirtyVersion   = 1
	dirtyBlock     = 4096
	dirtyChunkTag  = "VDRC"
	dirtyFlagAll   = 1
	dirtyFileInfix = ".dirty."
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// dirtySync makes a map file's writes durable; tests wrap it to see the
// order of marks and data writes.
var dirtySync = fdatasync

// dirtyHeader is what a map file says of itself.
type dirtyHeader struct {
	VolumeID, Replica string
	Size              int64
	Start, Through    uint64
	All               bool
}

func (h dirtyHeader) encode() []byte {
	b := make([]byte, dirtyBlock)
	copy(b, dirtyMagic)
	binary.LittleEndian.PutUint32(b[8:], dirtyVersion)
	if h.All {
		binary.LittleEndian.PutUint32(b[12:], dirtyFlagAll)
	}
	binary.LittleEndian.PutUint32(b[16:], DirtyRegionSize)
	binary.LittleEndian.PutUint32(b[20:], DirtyChunkRegions)
	binary.LittleEndian.PutUint64(b[24:], uint64(h.Size))
	binary.LittleEndian.PutUint64(b[32:], h.Start)
	binary.LittleEndian.PutUint64(b[40:], h.Through)
	binary.LittleEndian.PutUint16(b[48:], uint16(len(h.VolumeID)))
	binary.LittleEndian.PutUint16(b[50:], uint16(len(h.Replica)))
	n := copy(b[52:], h.VolumeID)
	copy(b[52+n:dirtyBlock-4], h.Replica)
	binary.LittleEndian.PutUint32(b[dirtyBlock-4:], crc32.Checksum(b[:dirtyBlock-4], castagnoli))
	return b
}

func decodeDirtyHeader(path string, b []byte) (dirtyHeader, error) {
	bad := func(what string, args ...any) (dirtyHeader, error) {
		return dirtyHeader{}, fmt.Errorf("%w: %s: %s", ErrDirtyMapCorrupt, path, fmt.Sprintf(what, args...))
	}
	if len(b) < dirtyBlock || string(b[:8]) != dirtyMagic {
		return bad("no header (magic %q expected)", dirtyMagic)
	}
	if got, want := binary.LittleEndian.Uint32(b[dirtyBlock-4:]), crc32.Checksum(b[:dirtyBlock-4], castagnoli); got != want {
		return bad("header checksum %08x, its content sums to %08x", got, want)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != dirtyVersion {
		return bad("format version %d; this server reads version %d", v, dirtyVersion)
	}
	if rs, cr := binary.LittleEndian.Uint32(b[16:]), binary.LittleEndian.Uint32(b[20:]); rs != DirtyRegionSize || cr != DirtyChunkRegions {
		return bad("regions of %d bytes, %d per chunk; this server uses %d and %d", rs, cr, DirtyRegionSize, DirtyChunkRegions)
	}
	lv, lr := int(binary.LittleEndian.Uint16(b[48:])), int(binary.LittleEndian.Uint16(b[50:]))
	if 52+lv+lr > dirtyBlock-4 {
		return bad("names of %d and %d bytes do not fit the header", lv, lr)
	}
	return dirtyHeader{
		All:      binary.LittleEndian.Uint32(b[12:])&dirtyFlagAll != 0,
		Size:     int64(binary.LittleEndian.Uint64(b[24:])),
		Start:    binary.LittleEndian.Uint64(b[32:]),
		Through:  binary.LittleEndian.Uint64(b[40:]),
		VolumeID: string(b[52 : 52+lv]),
		Replica:  string(b[52+lv : 52+lv+lr]),
	}, nil
}

func encodeChunk(ci int, c *dirtyChunk) []byte {
	b := make([]byte, dirtyBlock)
	copy(b, dirtyChunkTag)
	for w, word := range c {
		binary.LittleEndian.PutUint64(b[8+8*w:], word)
	}
	binary.LittleEndian.PutUint32(b[4:], chunkSum(ci, b[8:]))
	return b
}

func chunkSum(ci int, bitmap []byte) uint32 {
	var idx [8]byte
	binary.LittleEndian.PutUint64(idx[:], uint64(ci))
	return crc32.Update(crc32.Checksum(idx[:], castagnoli), castagnoli, bitmap)
}

// decodeChunk reads block b of chunk ci: nil for an all-zero block (a
// chunk never written).
func decodeChunk(path string, ci int, b []byte) (*dirtyChunk, error) {
	if bytes.Count(b, []byte{0}) == len(b) {
		return nil, nil
	}
	if string(b[:4]) != dirtyChunkTag {
		return nil, fmt.Errorf("%w: %s: chunk %d has no tag (torn or garbled block)", ErrDirtyMapCorrupt, path, ci)
	}
	if got, want := binary.LittleEndian.Uint32(b[4:]), chunkSum(ci, b[8:]); got != want {
		return nil, fmt.Errorf("%w: %s: chunk %d checksum %08x, its content sums to %08x (torn or garbled block)", ErrDirtyMapCorrupt, path, ci, got, want)
	}
	c := new(dirtyChunk)
	for w := range c {
		c[w] = binary.LittleEndian.Uint64(b[8+8*w:])
	}
	return c, nil
}

// dirtyPath is the file of the map of replica's copy of volume id that
// started at member epoch start.
func dirtyPath(dir, id, replica string, start uint64) string {
	return filepath.Join(dir, id+dirtyFileInfix+hex.EncodeToString([]byte(replica))+"."+strconv.FormatUint(start, 10))
}

// parseDirtyName reads a map file's name: its volume, replica and start.
func parseDirtyName(name string) (id, replica string, start uint64, ok bool) {
	id, rest, ok := strings.Cut(name, dirtyFileInfix)
	if !ok {
		return "", "", 0, false
	}
	hx, st, ok := strings.Cut(rest, ".")
	r, err1 := hex.DecodeString(hx)
	n, err2 := strconv.ParseUint(st, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return "", "", 0, false
	}
	return id, string(r), n, true
}

// dirtyFile is one map and its file. mark and setThrough may be called
// concurrently with each other and with covers and snapshot.
type dirtyFile struct {
	path string
	f    *os.File
	// persist orders the writers of the file; hdr and broken are its.
	persist sync.Mutex
	hdr     dirtyHeader
	// broken latches a failed write or sync of the file: after it, the
	// kernel may have dropped the pages, so no later mark is trusted.
	broken error
	// mu guards m, which holds only marks already durable.
	mu sync.RWMutex
	m  *DirtyMap
}

// createDirtyFile writes a new map file for h (all dirty when h.All),
// durably (the file and its directory), replacing any file of that name.
func createDirtyFile(path string, h dirtyHeader) (*dirtyFile, error) {
	m, err := NewDirtyMap(h.Size)
	if err != nil {
		return nil, err
	}
	if h.All {
		m.SetAll()
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("dirty-region map %s: %w", path, err)
	}
	err = func() error {
		if _, err := f.WriteAt(h.encode(), 0); err != nil {
			return err
		}
		if err := f.Truncate(dirtyBlock * int64(1+len(m.chunks))); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		return syncDir(filepath.Dir(path))
	}()
	if err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("dirty-region map %s: %w", path, err)
	}
	return &dirtyFile{path: path, f: f, hdr: h, m: m}, nil
}

// openDirtyFile opens the map file at path. A torn or garbled file is
// ErrDirtyMapCorrupt; the caller takes the map as all dirty.
func openDirtyFile(path string) (*dirtyFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("dirty-region map %s: %w", path, err)
	}
	df, err := readDirtyFile(path, f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return df, nil
}

func readDirtyFile(path string, f *os.File) (*dirtyFile, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("dirty-region map %s: %w", path, err)
	}
	head := make([]byte, dirtyBlock)
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, fmt.Errorf("%w: %s: header: %v", ErrDirtyMapCorrupt, path, err)
	}
	h, err := decodeDirtyHeader(path, head)
	if err != nil {
		return nil, err
	}
	m, err := NewDirtyMap(h.Size)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrDirtyMapCorrupt, path, err)
	}
	if want := dirtyBlock * int64(1+len(m.chunks)); fi.Size() != want {
		return nil, fmt.Errorf("%w: %s is %d bytes; a map of a volume of %d bytes is %d", ErrDirtyMapCorrupt, path, fi.Size(), h.Size, want)
	}
	if h.All {
		m.SetAll()
		return &dirtyFile{path: path, f: f, hdr: h, m: m}, nil
	}
	b := make([]byte, dirtyBlock)
	for ci := range m.chunks {
		if _, err := f.ReadAt(b, dirtyBlock*int64(1+ci)); err != nil {
			return nil, fmt.Errorf("%w: %s: chunk %d: %v", ErrDirtyMapCorrupt, path, ci, err)
		}
		if m.chunks[ci], err = decodeChunk(path, ci, b); err != nil {
			return nil, err
		}
	}
	return &dirtyFile{path: path, f: f, hdr: h, m: m}, nil
}

// covers says whether the byte range's regions are all durably dirty.
func (d *dirtyFile) covers(off, n int64) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.m.Covers(off, n)
}

// mark makes the byte range's regions dirty, durably, before it returns:
// the changed chunks are written and the file synced, then the bits shown
// to covers. A range already covered costs no I/O.
func (d *dirtyFile) mark(off, n int64) error {
	if d.covers(off, n) {
		return nil
	}
	d.persist.Lock()
	defer d.persist.Unlock()
	if d.broken != nil {
		return d.broken
	}
	// Only this goroutine changes d.m now; work on a copy of the chunks the
	// range touches, so covers never sees a bit before it is durable.
	next := &DirtyMap{size: d.m.size, regions: d.m.regions, all: d.m.all, chunks: make([]*dirtyChunk, len(d.m.chunks))}
	if first, last, ok := regionSpan(off, n); ok && !next.all {
		for ci := first / DirtyChunkRegions; ci <= last/DirtyChunkRegions; ci++ {
			if c := d.m.chunks[ci]; c != nil {
				cp := *c
				next.chunks[ci] = &cp
			}
		}
	}
	changed, err := next.Mark(off, n)
	if err != nil || len(changed) == 0 {
		return err
	}
	for _, ci := range changed {
		if _, err := d.f.WriteAt(encodeChunk(ci, next.chunks[ci]), dirtyBlock*int64(1+ci)); err != nil {
			return d.fail("write", err)
		}
	}
	if err := dirtySync(d.f); err != nil {
		return d.fail("sync", err)
	}
	d.mu.Lock()
	for _, ci := range changed {
		d.m.chunks[ci] = next.chunks[ci]
	}
	d.mu.Unlock()
	return nil
}

// fail latches a failed write or sync of the file. The caller holds persist.
func (d *dirtyFile) fail(what string, err error) error {
	d.broken = fmt.Errorf("dirty-region map %s of volume %s for replica %s: %s failed, so no later mark is trusted; nothing was written to the volume: %w",
		d.path, d.hdr.VolumeID, d.hdr.Replica, what, err)
	return d.broken
}

// setThrough records, durably, that the map was kept through member epoch e.
func (d *dirtyFile) setThrough(e uint64) error {
	d.persist.Lock()
	defer d.persist.Unlock()
	if d.broken != nil {
		return d.broken
	}
	h := d.hdr
	h.Through = e
	if _, err := d.f.WriteAt(h.encode(), 0); err != nil {
		return d.fail("write of the header", err)
	}
	if err := dirtySync(d.f); err != nil {
		return d.fail("sync of the header", err)
	}
	d.hdr = h
	return nil
}

// snapshot is a copy of the map's durable marks.
func (d *dirtyFile) snapshot() *DirtyMap {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.m.Clone()
}

// header is the file's header as last written.
func (d *dirtyFile) header() dirtyHeader {
	d.persist.Lock()
	defer d.persist.Unlock()
	return d.hdr
}

// remove closes and deletes the file. A file left behind by a crash is
// harmless: it is trusted only when it was kept through the member epoch
// the server finds at its start (dirtytrack.go).
func (d *dirtyFile) remove() error {
	d.persist.Lock()
	defer d.persist.Unlock()
	if d.f == nil { // never made (brokenDirty)
		return nil
	}
	_ = d.f.Close()
	if err := os.Remove(d.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// close closes the file and keeps it.
func (d *dirtyFile) close() {
	d.persist.Lock()
	defer d.persist.Unlock()
	if d.f != nil {
		_ = d.f.Close()
	}
}
