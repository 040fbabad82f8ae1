package ociimage

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strings"
)

// ErrMissingLibrary is returned when a dynamically linked program's
// interpreter or one of its shared libraries is not where the dynamic loader
// will look for it: on this machine when adding it, or in an image.
var ErrMissingLibrary = errors.New("shared library not found")

// multiarch is Debian's multiarch triplet of this machine's architecture.
func multiarch() string {
	switch runtime.GOARCH {
	case "arm64":
		return "aarch64-linux-gnu"
	default:
		return "x86_64-linux-gnu"
	}
}

// SearchDirs are the directories glibc's dynamic loader searches for a
// library when neither the program (RPATH, RUNPATH) nor an ld.so.cache names
// another: Debian's system search path, multiarch directories first. An image
// holds no ld.so.cache, so its libraries go here.
func SearchDirs() []string {
	m := multiarch()
	return []string{"/lib/" + m, "/usr/lib/" + m, "/lib", "/usr/lib"}
}

// elfDeps is what an ELF file needs from the file system to run: its program
// interpreter (empty for a static program) and its DT_NEEDED libraries.
type elfDeps struct {
	interp string
	needed []string
}

// readELF reads r's dependencies; isELF is false, with no error, for a file
// that is not ELF.
func readELF(r io.ReaderAt) (deps elfDeps, isELF bool, err error) {
	magic := make([]byte, 4)
	if _, err := r.ReadAt(magic, 0); err != nil || !bytes.Equal(magic, []byte(elf.ELFMAG)) {
		return elfDeps{}, false, nil
	}
	f, err := elf.NewFile(r)
	if err != nil {
		return elfDeps{}, true, err
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return elfDeps{}, true, err
			}
			deps.interp = strings.TrimRight(string(b), "\x00")
		}
	}
	deps.needed, err = f.ImportedLibraries()
	return deps, true, err
}

func readHostELF(host string) (elfDeps, bool, error) {
	f, err := os.Open(host)
	if err != nil {
		return elfDeps{}, false, err
	}
	defer f.Close()
	deps, isELF, err := readELF(f)
	if err != nil {
		return deps, isELF, fmt.Errorf("read ELF %s: %w", host, err)
	}
	return deps, isELF, nil
}

// AddELF adds the program host at p and, when it is dynamically linked, its
// program interpreter at the path the program names and every shared library
// it needs (and they need), each from the first of SearchDirs on this machine
// that holds it, at the same path in the image.
func (t *Tree) AddELF(p, host string) error {
	if err := t.HostFile(p, host); err != nil {
		return err
	}
	deps, isELF, err := readHostELF(host)
	if err != nil {
		return err
	}
	if !isELF {
		return fmt.Errorf("add %s to the image: %s is not an ELF program", p, host)
	}
	if deps.interp != "" {
		if err := t.HostFile(deps.interp, deps.interp); err != nil {
			return fmt.Errorf("%w: %s's interpreter: %v", ErrMissingLibrary, host, err)
		}
	}
	queue, seen := deps.needed, map[string]bool{}
	for len(queue) > 0 {
		lib := queue[0]
		queue = queue[1:]
		if seen[lib] {
			continue
		}
		seen[lib] = true
		found := ""
		for _, d := range SearchDirs() {
			if fi, err := os.Stat(path.Join(d, lib)); err == nil && fi.Mode().IsRegular() {
				found = path.Join(d, lib)
				break
			}
		}
		if found == "" {
			return fmt.Errorf("%w: %s needs %s, which none of %v holds on this machine", ErrMissingLibrary, host, lib, SearchDirs())
		}
		if err := t.HostFile(found, found); err != nil {
			return err
		}
		more, _, err := readHostELF(found)
		if err != nil {
			return err
		}
		queue = append(queue, more.needed...)
	}
	return nil
}

// view is a file system seen by path: each path's type and link target.
type view map[string]viewEntry

type viewEntry struct {
	typ  byte
	link string
}

// resolve follows symbolic links (in any component) to the path p names,
// which must exist; ok is false when it does not or links loop.
func (v view) resolve(p string) (string, bool) {
	for hops := 0; hops <= 40; hops++ {
		parts := strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
		cur, relinked := "/", false
		for i, part := range parts {
			next := path.Join(cur, part)
			e, ok := v[next]
			if !ok {
				return "", false
			}
			if e.typ == tar.TypeSymlink {
				link := e.link
				if !path.IsAbs(link) {
					link = path.Join(cur, link)
				}
				p, relinked = path.Join(append([]string{link}, parts[i+1:]...)...), true
				break
			}
			if i < len(parts)-1 && e.typ != tar.TypeDir {
				return "", false
			}
			cur = next
		}
		if !relinked {
			return cur, true
		}
	}
	return "", false
}

// checkDeps returns why the program at p would not start in v.
func (v view) checkDeps(p string, deps elfDeps) []error {
	var errs []error
	if r, ok := v.resolve(deps.interp); deps.interp != "" && (!ok || v[r].typ != tar.TypeReg) {
		errs = append(errs, fmt.Errorf("%w: %s: its interpreter %s is not in the image", ErrMissingLibrary, p, deps.interp))
	}
	for _, lib := range deps.needed {
		found := false
		for _, d := range SearchDirs() {
			if r, ok := v.resolve(path.Join(d, lib)); ok && v[r].typ == tar.TypeReg {
				found = true
				break
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("%w: %s needs %s, which is in none of %v in the image", ErrMissingLibrary, p, lib, SearchDirs()))
		}
	}
	return errs
}

func (t *Tree) view() view {
	v := view{}
	for _, p := range t.all() {
		if e, ok := t.entries[p]; ok {
			v[p] = viewEntry{typ: e.typ, link: e.link}
		} else {
			v[p] = viewEntry{typ: tar.TypeDir}
		}
	}
	v["/"] = viewEntry{typ: tar.TypeDir}
	return v
}

// CheckELF returns, for every ELF program of the Tree, why it would not start
// in the image: its interpreter or a library it needs missing. Nil: every one
// is static or finds what it needs.
func (t *Tree) CheckELF() []error {
	v := t.view()
	var errs []error
	for _, p := range t.Paths() {
		e := t.entries[p]
		if e.typ != tar.TypeReg {
			continue
		}
		var deps elfDeps
		var err error
		if e.host != "" {
			deps, _, err = readHostELF(e.host)
		} else {
			deps, _, err = readELF(bytes.NewReader(e.data))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		errs = append(errs, v.checkDeps(p, deps)...)
	}
	return errs
}
