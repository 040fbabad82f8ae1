package datapath

import (
	"fmt"
	"math/bits"
)

// A dirty-region map: which regions of a volume were written while one of
// its replicas was out of sync, so that the replica, returning, copies only
// those (delta resync, docs/architecture.md "Replicated volumes"). Every
// in-sync replica keeps one per out-of-sync replica (dirtyfile.go persists
// it, dirtytrack.go keeps it with the volume's replica set).
//
// The region is DirtyRegionSize, 4 KiB: the block of the file systems the
// engine carries and the page of the kernel's cache, so a 4 KiB write aligned
// to it (what ext4 and xfs on a 4 KiB-block device send) dirties exactly the
// bytes it wrote, and the copy is at most the bytes written while away, 1.0
// times, under the design's 1.1. An unaligned write of n bytes dirties at
// most n + 2×4 KiB - 2 bytes. The price is the map's size: one bit per 4 KiB,
// 32 MiB for a fully dirty 1 TiB volume; chunks no write touched take no
// memory and no disk (the file is sparse).
//
// The map is split into chunks of DirtyChunkRegions regions, each stored
// on disk with a checksum in one 4 KiB block of its own (dirtyfile.go), so
// that marking a clean region rewrites one block.

// DirtyRegionSize is the bytes one bit of a dirty-region map stands for.
const DirtyRegionSize = 4096

const (
	// dirtyChunkBytes is one chunk's bitmap on disk: a 4 KiB block less the
	// 8 bytes of its tag and checksum.
	dirtyChunkBytes = 4096 - 8
	dirtyChunkWords = dirtyChunkBytes / 8
	// DirtyChunkRegions is how many regions one chunk of the map holds.
	DirtyChunkRegions = dirtyChunkWords * 64
)

type dirtyChunk [dirtyChunkWords]uint64

// DirtyMap is a set of regions of a volume of Size bytes. Its zero value is
// not usable; NewDirtyMap makes one. It is not safe for concurrent use
// (dirtyFile guards its own).
type DirtyMap struct {
	size    int64
	regions int64
	// all: every region is dirty (a map that cannot be trusted, or a
	// replica that has nothing); chunks then stay nil.
	all    bool
	chunks []*dirtyChunk
}

// DirtyRange is a byte range of a volume: Len bytes from Off.
type DirtyRange struct {
	Off, Len int64
}

// NewDirtyMap makes an empty map of a volume of size bytes (more than 0).
func NewDirtyMap(size int64) (*DirtyMap, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: dirty-region map of a volume of %d bytes; the size must be more than 0", ErrInvalidArgument, size)
	}
	regions := (size + DirtyRegionSize - 1) / DirtyRegionSize
	nchunks := (regions + DirtyChunkRegions - 1) / DirtyChunkRegions
	return &DirtyMap{size: size, regions: regions, chunks: make([]*dirtyChunk, nchunks)}, nil
}

// Size is the volume's size the map covers.
func (m *DirtyMap) Size() int64 { return m.size }

// All says whether every region is dirty.
func (m *DirtyMap) All() bool { return m.all }

// SetAll makes every region dirty: a full copy.
func (m *DirtyMap) SetAll() {
	m.all = true
	clear(m.chunks)
}

// regionSpan is the first and last region a byte range touches; ok is false
// for an empty range. The range must lie inside the volume (checkRange).
func regionSpan(off, n int64) (first, last int64, ok bool) {
	if n <= 0 {
		return 0, 0, false
	}
	return off / DirtyRegionSize, (off + n - 1) / DirtyRegionSize, true
}

func (m *DirtyMap) checkRange(off, n int64) error {
	if off < 0 || n < 0 || off > m.size || n > m.size-off {
		return fmt.Errorf("%w: dirty range of %d bytes at %d: the volume has %d bytes", ErrOutOfRange, n, off, m.size)
	}
	return nil
}

func (m *DirtyMap) has(r int64) bool {
	if m.all {
		return true
	}
	c := m.chunks[r/DirtyChunkRegions]
	if c == nil {
		return false
	}
	i := r % DirtyChunkRegions
	return c[i/64]&(1<<(i%64)) != 0
}

// Covers says whether every region the byte range touches is dirty already
// (an empty range is covered). A range outside the volume is not.
func (m *DirtyMap) Covers(off, n int64) bool {
	if m.checkRange(off, n) != nil {
		return false
	}
	first, last, ok := regionSpan(off, n)
	if !ok || m.all {
		return true
	}
	for r := first; r <= last; r++ {
		if !m.has(r) {
			return false
		}
	}
	return true
}

// Mark makes dirty every region the byte range touches and returns the
// chunks it changed, in order (none when all were dirty already).
func (m *DirtyMap) Mark(off, n int64) ([]int, error) {
	if err := m.checkRange(off, n); err != nil {
		return nil, err
	}
	first, last, ok := regionSpan(off, n)
	if !ok || m.all {
		return nil, nil
	}
	var changed []int
	for r := first; r <= last; r++ {
		ci := int(r / DirtyChunkRegions)
		c := m.chunks[ci]
		if c == nil {
			c = new(dirtyChunk)
			m.chunks[ci] = c
		}
		i := r % DirtyChunkRegions
		bit := uint64(1) << (i % 64)
		if c[i/64]&bit == 0 {
			c[i/64] |= bit
			if len(changed) == 0 || changed[len(changed)-1] != ci {
				changed = append(changed, ci)
			}
		}
	}
	return changed, nil
}

// Union adds o's dirty regions to m; both must cover the same size.
func (m *DirtyMap) Union(o *DirtyMap) error {
	if o.size != m.size {
		return fmt.Errorf("%w: union of dirty-region maps of %d and %d bytes; both must be of the same volume", ErrInvalidArgument, m.size, o.size)
	}
	if o.all {
		m.SetAll()
	}
	if m.all {
		return nil
	}
	for ci, oc := range o.chunks {
		if oc == nil {
			continue
		}
		if m.chunks[ci] == nil {
			m.chunks[ci] = new(dirtyChunk)
		}
		for w := range oc {
			m.chunks[ci][w] |= oc[w]
		}
	}
	return nil
}

// Count is the number of dirty regions.
func (m *DirtyMap) Count() int64 {
	if m.all {
		return m.regions
	}
	var n int64
	for _, c := range m.chunks {
		if c == nil {
			continue
		}
		for _, w := range c {
			n += int64(bits.OnesCount64(w))
		}
	}
	return n
}

// Bytes is the bytes of the volume its dirty regions hold (the last region
// of a volume whose size is not a multiple of DirtyRegionSize is shorter).
func (m *DirtyMap) Bytes() int64 {
	var n int64
	for _, r := range m.Ranges() {
		n += r.Len
	}
	return n
}

// Ranges is the dirty regions as byte ranges, adjacent regions joined, in
// order; the last one ends at the volume's size at most.
func (m *DirtyMap) Ranges() []DirtyRange {
	if m.all {
		return []DirtyRange{{0, m.size}}
	}
	var out []DirtyRange
	for ci, c := range m.chunks {
		if c == nil {
			continue
		}
		for w, word := range c {
			for word != 0 {
				b := bits.TrailingZeros64(word)
				word &^= 1 << b
				r := int64(ci)*DirtyChunkRegions + int64(w)*64 + int64(b)
				off := r * DirtyRegionSize
				n := min(int64(DirtyRegionSize), m.size-off)
				if k := len(out) - 1; k >= 0 && out[k].Off+out[k].Len == off {
					out[k].Len += n
				} else {
					out = append(out, DirtyRange{off, n})
				}
			}
		}
	}
	return out
}

// Clone is a copy of m that shares nothing with it.
func (m *DirtyMap) Clone() *DirtyMap {
	c := &DirtyMap{size: m.size, regions: m.regions, all: m.all, chunks: make([]*dirtyChunk, len(m.chunks))}
	for i, ch := range m.chunks {
		if ch != nil {
			cp := *ch
			c.chunks[i] = &cp
		}
	}
	return c
}
