package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"time"
)

// ErrBadPath is returned for a path in an image that is not absolute and
// clean, or that two entries of a Tree claim differently.
var ErrBadPath = errors.New("bad path in image")

// entry is one file of a Tree: a regular file read from host or held in data,
// a directory, or a symbolic link to link.
type entry struct {
	typ  byte // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	mode fs.FileMode
	host string
	data []byte
	link string
}

// Tree is the file system of one layer, built in memory (host files are read
// only when the layer is written). Parents of every entry are added as
// directories 0755 when the layer is written. Every entry belongs to root and
// has the modification time 0, so the same Tree always gives the same layer.
type Tree struct {
	entries map[string]*entry
}

// NewTree returns an empty Tree.
func NewTree() *Tree { return &Tree{entries: map[string]*entry{}} }

func checkPath(p string) error {
	if p == "" || p[0] != '/' || path.Clean(p) != p || p == "/" {
		return fmt.Errorf("%w: %q: want an absolute, clean path other than /", ErrBadPath, p)
	}
	return nil
}

// add records e at p; adding the same entry twice is not an error, adding a
// different one at the same path is.
func (t *Tree) add(p string, e *entry) error {
	if err := checkPath(p); err != nil {
		return err
	}
	if old, ok := t.entries[p]; ok {
		if old.typ == e.typ && old.mode == e.mode && old.host == e.host && old.link == e.link && bytes.Equal(old.data, e.data) {
			return nil
		}
		return fmt.Errorf("%w: %s is added twice with different contents", ErrBadPath, p)
	}
	t.entries[p] = e
	return nil
}

// Dir adds the directory p with mode (permission and sticky bits; the
// sticky bit as fs.ModeSticky or as 0o1000).
func (t *Tree) Dir(p string, mode fs.FileMode) error {
	if mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return t.add(p, &entry{typ: tar.TypeDir, mode: mode & (fs.ModePerm | fs.ModeSticky)})
}

// Bytes adds the regular file p holding data.
func (t *Tree) Bytes(p string, data []byte, mode fs.FileMode) error {
	return t.add(p, &entry{typ: tar.TypeReg, mode: mode & fs.ModePerm, data: slices.Clone(data)})
}

// Symlink adds the symbolic link p pointing at target.
func (t *Tree) Symlink(p, target string) error {
	if target == "" {
		return fmt.Errorf("%w: symbolic link %s has an empty target", ErrBadPath, p)
	}
	return t.add(p, &entry{typ: tar.TypeSymlink, mode: 0o777, link: target})
}

// HostFile adds the regular file p with the contents of host (symbolic links
// followed) and host's permission bits.
func (t *Tree) HostFile(p, host string) error {
	fi, err := os.Stat(host)
	if err != nil {
		return fmt.Errorf("add %s to the image: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("add %s to the image: %s is not a regular file", p, host)
	}
	return t.add(p, &entry{typ: tar.TypeReg, mode: fi.Mode().Perm(), host: host})
}

// Paths returns every path added, sorted.
func (t *Tree) Paths() []string {
	out := make([]string, 0, len(t.entries))
	for p := range t.entries {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// all returns the entries with every missing parent directory added, sorted.
func (t *Tree) all() []string {
	seen := map[string]bool{}
	var out []string
	for p := range t.entries {
		for q := p; q != "/" && !seen[q]; q = path.Dir(q) {
			seen[q] = true
			out = append(out, q)
		}
	}
	slices.Sort(out)
	return out
}

// WriteTar writes the Tree as an uncompressed tar stream (a layer).
func (t *Tree) WriteTar(w io.Writer) error {
	tw := tar.NewWriter(w)
	for _, p := range t.all() {
		e, ok := t.entries[p]
		if !ok {
			e = &entry{typ: tar.TypeDir, mode: 0o755}
		}
		if err := writeEntry(tw, p, e); err != nil {
			return err
		}
	}
	return tw.Close()
}

func writeEntry(tw *tar.Writer, p string, e *entry) error {
	h := &tar.Header{Typeflag: e.typ, Name: p[1:], Mode: int64(e.mode.Perm()), Linkname: e.link,
		ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
	if e.mode&fs.ModeSticky != 0 {
		h.Mode |= 0o1000
	}
	if e.typ == tar.TypeDir {
		h.Name += "/"
	}
	if e.typ != tar.TypeReg {
		return tw.WriteHeader(h)
	}
	if e.host == "" {
		h.Size = int64(len(e.data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(e.data)
		return err
	}
	f, err := os.Open(e.host)
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	h.Size = fi.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if _, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("layer: copy %s: %w", e.host, err)
	}
	return nil
}
