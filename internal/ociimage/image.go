package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Config is what a container started from the image runs, and as whom.
type Config struct {
	// User is "UID" or "UID:GID", numeric, so that no /etc/passwd is needed.
	User       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	Labels     map[string]string
}

// Build makes an image for this machine's architecture of one layer, t, and
// cfg. The layer is compressed once, when the image is written.
func Build(t *Tree, cfg Config) (v1.Image, error) {
	if errs := t.CheckELF(); len(errs) > 0 {
		return nil, fmt.Errorf("the image would not run: %w", errors.Join(errs...))
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(t.WriteTar(pw)) }()
		return pr, nil
	}, tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{User: cfg.User, Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, Env: cfg.Env,
		WorkingDir: cfg.WorkingDir, Labels: cfg.Labels}
	return mutate.ConfigFile(img, cf)
}

// WriteArchive writes img as a docker-archive tarball at file, tagged ref
// (e.g. "localhost/vigil-tools:latest"), through a temporary file in the same
// directory, so that file is either the whole image or untouched. It returns
// the tarball's size.
func WriteArchive(file, ref string, img v1.Image) (int64, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return 0, fmt.Errorf("image name %q: %w", ref, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return 0, fmt.Errorf("write image %s: %w", ref, err)
	}
	defer os.Remove(tmp.Name())
	if err := tarball.Write(tag, img, tmp); err != nil {
		tmp.Close()
		return 0, fmt.Errorf("write image %s to %s: %w", ref, file, err)
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return 0, err
	}
	fi, err := os.Stat(file)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// ReadArchive reads the image tagged ref (empty: the only one) from the
// docker-archive tarball file.
func ReadArchive(file, ref string) (v1.Image, error) {
	var tag *name.Tag
	if ref != "" {
		t, err := name.NewTag(ref)
		if err != nil {
			return nil, fmt.Errorf("image name %q: %w", ref, err)
		}
		tag = &t
	}
	return tarball.ImageFromPath(file, tag)
}

// File is one entry of an image's file system.
type File struct {
	Type     byte // tar.TypeReg, tar.TypeDir, tar.TypeSymlink, ...
	Mode     int64
	UID, GID int
	Size     int64
	Link     string
	// ELF is set for an ELF file; Interp and Needed are its program
	// interpreter (empty: static) and DT_NEEDED libraries.
	ELF    bool
	Interp string
	Needed []string
}

// Contents is an image's file system, its layers applied in order.
type Contents struct {
	Files map[string]File // by absolute path
}

// Read reads img's file system.
func Read(img v1.Image) (*Contents, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	c := &Contents{Files: map[string]File{"/": {Type: tar.TypeDir, Mode: 0o755}}}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return c, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read image: %w", err)
		}
		p := path.Clean("/" + h.Name)
		f := File{Type: h.Typeflag, Mode: h.Mode, UID: h.Uid, GID: h.Gid, Size: h.Size, Link: h.Linkname}
		if h.Typeflag == tar.TypeReg && h.Size >= 4 {
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("read image: %s: %w", p, err)
			}
			deps, isELF, err := readELF(bytes.NewReader(data))
			if err != nil {
				return nil, fmt.Errorf("read image: %s: %w", p, err)
			}
			f.ELF, f.Interp, f.Needed = isELF, deps.interp, deps.needed
		}
		c.Files[p] = f
		for q := path.Dir(p); q != "/"; q = path.Dir(q) {
			if _, ok := c.Files[q]; !ok {
				c.Files[q] = File{Type: tar.TypeDir, Mode: 0o755}
			}
		}
	}
}

// Resolve follows symbolic links to the file p names in the image.
func (c *Contents) Resolve(p string) (string, bool) { return c.view().resolve(p) }

func (c *Contents) view() view {
	v := view{}
	for p, f := range c.Files {
		v[p] = viewEntry{typ: f.Type, link: f.Link}
	}
	return v
}

// CheckELF returns, for every ELF file of the image, why it would not start:
// its interpreter or a library it needs missing.
func (c *Contents) CheckELF() []error {
	v := c.view()
	var errs []error
	for p, f := range c.Files {
		if f.ELF {
			errs = append(errs, v.checkDeps(p, elfDeps{interp: f.Interp, needed: f.Needed})...)
		}
	}
	return errs
}
