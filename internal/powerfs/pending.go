package powerfs

import (
	"errors"
	"fmt"
	"io"
	"sort"

	"golang.org/x/sys/unix"
)

// pageSize is the granule in which unsynced writes are kept.
const pageSize = 4096

type page [pageSize]byte

// pending is what one file has had done to it since its last fsync: the
// writes (whole pages, merged over the backing file), the size the file shows
// and how much of the backing file is still its content. It is only memory:
// losing it is the power cut. The zero value is not usable; see newPending.
//
// Invariants: keep <= size; a page holds zeros past size; no page starts at or
// past size.
type pending struct {
	size  int64 // the file's size as readers see it
	keep  int64 // the backing file's bytes before keep are still the file's (a truncate below them cuts keep)
	pages map[int64]*page
}

// newPending starts the record of a file whose backing file is size bytes.
func newPending(size int64) *pending {
	return &pending{size: size, keep: size, pages: map[int64]*page{}}
}

// readAt fills p with the file's bytes at off, as the layer shows them: the
// backing file's bytes before keep, zeros after, pages on top; it returns how
// many bytes the file has there (short at the end of the file).
func (s *pending) readAt(backing io.ReaderAt, p []byte, off int64) (int, error) {
	if off >= s.size {
		return 0, nil
	}
	n := int(min(int64(len(p)), s.size-off))
	p = p[:n]
	clear(p)
	if off < s.keep {
		m := int(min(int64(n), s.keep-off))
		if _, err := backing.ReadAt(p[:m], off); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
	}
	for idx := off / pageSize; idx*pageSize < off+int64(n); idx++ {
		pg := s.pages[idx]
		if pg == nil {
			continue
		}
		start := idx * pageSize
		from := max(off, start)
		to := min(off+int64(n), start+pageSize)
		copy(p[from-off:to-off], pg[from-start:to-start])
	}
	return n, nil
}

// writeAt records p written at off. A page not yet kept is first filled from
// what the file shows there.
func (s *pending) writeAt(backing io.ReaderAt, p []byte, off int64) error {
	end := off + int64(len(p))
	for idx := off / pageSize; idx*pageSize < end; idx++ {
		start := idx * pageSize
		pg := s.pages[idx]
		if pg == nil {
			pg = new(page)
			if _, err := s.readAt(backing, pg[:], start); err != nil {
				return err
			}
			s.pages[idx] = pg
		}
		from := max(off, start)
		to := min(end, start+pageSize)
		copy(pg[from-start:to-start], p[from-off:to-off])
	}
	s.size = max(s.size, end)
	return nil
}

// truncate sets the size: shorter drops what lies past it (and stops trusting
// the backing file there), longer shows zeros.
func (s *pending) truncate(size int64) {
	if size < s.size {
		for idx, pg := range s.pages {
			start := idx * pageSize
			switch {
			case start >= size:
				delete(s.pages, idx)
			case start+pageSize > size:
				clear(pg[size-start:])
			}
		}
		s.keep = min(s.keep, size)
	}
	s.size = size
}

// extend makes the file at least size bytes (fallocate without KEEP_SIZE).
func (s *pending) extend(size int64) { s.size = max(s.size, size) }

// apply writes what is pending into the backing file fd, whose size is
// backingSize: cut it to keep, write the pages, give it the size. The caller
// syncs fd afterwards.
func (s *pending) apply(fd int, backingSize int64) error {
	if s.keep < backingSize {
		if err := unix.Ftruncate(fd, s.keep); err != nil {
			return fmt.Errorf("truncate to %d: %w", s.keep, err)
		}
	}
	idxs := make([]int64, 0, len(s.pages))
	for idx := range s.pages {
		idxs = append(idxs, idx)
	}
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	for _, idx := range idxs {
		start := idx * pageSize
		n := min(int64(pageSize), s.size-start)
		if err := pwriteAll(fd, s.pages[idx][:n], start); err != nil {
			return fmt.Errorf("write %d bytes at %d: %w", n, start, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Size != s.size {
		if err := unix.Ftruncate(fd, s.size); err != nil {
			return fmt.Errorf("truncate to %d: %w", s.size, err)
		}
	}
	return nil
}

func pwriteAll(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pwrite(fd, p, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}
