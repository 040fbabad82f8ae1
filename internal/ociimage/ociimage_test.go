package ociimage

import (
	"archive/tar"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/internal/testenv"
)

func TestView_Resolve(t *testing.T) {
	v := view{
		"/": {typ: tar.TypeDir}, "/lib": {typ: tar.TypeSymlink, link: "usr/lib"}, "/usr": {typ: tar.TypeDir},
		"/usr/lib": {typ: tar.TypeDir}, "/usr/lib/libc.so.6": {typ: tar.TypeReg},
		"/usr/lib/libc.so": {typ: tar.TypeSymlink, link: "/lib/libc.so.6"},
		"/loop":            {typ: tar.TypeSymlink, link: "/loop"}, "/file": {typ: tar.TypeReg},
	}
	for in, want := range map[string]string{
		"/lib/libc.so.6": "/usr/lib/libc.so.6", "/usr/lib/libc.so": "/usr/lib/libc.so.6", "/lib": "/usr/lib",
		"/loop": "", "/lib/missing": "", "/file/x": "",
	} {
		got, ok := v.resolve(in)
		if ok != (want != "") || got != want {
			t.Errorf("resolve(%s) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

// TestTree_CheckELF_MissingLibrary: a dynamically linked program copied alone
// is refused, naming the library; with AddELF it is complete.
func TestTree_CheckELF_MissingLibrary(t *testing.T) {
	testenv.RequireTool(t, "mke2fs", "e2fsprogs")
	mke2fs, err := exec.LookPath("mke2fs")
	if err != nil {
		t.Fatal(err)
	}
	alone := NewTree()
	if err := alone.HostFile("/usr/sbin/mke2fs", mke2fs); err != nil {
		t.Fatal(err)
	}
	errs := alone.CheckELF()
	if len(errs) == 0 || !errors.Is(errs[0], ErrMissingLibrary) || !strings.Contains(errors.Join(errs...).Error(), "libext2fs.so.2") {
		t.Errorf("CheckELF of mke2fs without its libraries = %v, want ErrMissingLibrary naming libext2fs.so.2", errs)
	}
	if _, err := Build(alone, Config{}); !errors.Is(err, ErrMissingLibrary) {
		t.Errorf("Build of an image that cannot run = %v, want ErrMissingLibrary", err)
	}
	whole := NewTree()
	if err := whole.AddELF("/usr/sbin/mke2fs", mke2fs); err != nil {
		t.Fatal(err)
	}
	if errs := whole.CheckELF(); len(errs) > 0 {
		t.Errorf("CheckELF after AddELF = %v", errs)
	}
	if !strings.Contains(strings.Join(whole.Paths(), " "), "/libext2fs.so.2") {
		t.Errorf("AddELF did not add libext2fs.so.2: %v", whole.Paths())
	}
}

// TestWriteArchive_ReadBack: an image written and read back holds the same
// files and config, parents included.
func TestWriteArchive_ReadBack(t *testing.T) {
	tr := NewTree()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tr.Bytes("/etc/motd", []byte("hi\n"), 0o644))
	must(tr.Symlink("/etc/issue", "motd"))
	must(tr.Dir("/tmp", 0o1777))
	img, err := Build(tr, Config{User: "65532:65532", Entrypoint: []string{"/bin/true"}})
	must(err)
	file := filepath.Join(t.TempDir(), "x.tar")
	if _, err := WriteArchive(file, "localhost/x:1", img); err != nil {
		t.Fatal(err)
	}
	back, err := ReadArchive(file, "localhost/x:1")
	must(err)
	c, err := Read(back)
	must(err)
	if r, ok := c.Resolve("/etc/issue"); !ok || r != "/etc/motd" || c.Files[r].Size != 3 {
		t.Errorf("/etc/issue resolves to %q (%v), want /etc/motd of 3 bytes", r, ok)
	}
	if f := c.Files["/tmp"]; f.Type != tar.TypeDir || f.Mode != 0o1777 {
		t.Errorf("/tmp = %+v, want a directory 1777", f)
	}
	cf, err := back.ConfigFile()
	must(err)
	if cf.Config.User != "65532:65532" || cf.Config.Entrypoint[0] != "/bin/true" || cf.OS != "linux" {
		t.Errorf("config %+v", cf.Config)
	}
}

func TestTree_BadInput(t *testing.T) {
	tr := NewTree()
	for _, p := range []string{"", "relative", "/a/../b", "/", "/a/"} {
		if err := tr.Bytes(p, nil, 0o644); !errors.Is(err, ErrBadPath) {
			t.Errorf("Bytes(%q) = %v, want ErrBadPath", p, err)
		}
	}
	if err := tr.Bytes("/a", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := tr.Bytes("/a", []byte("1"), 0o644); err != nil {
		t.Errorf("the same file twice = %v, want nil", err)
	}
	if err := tr.Bytes("/a", []byte("2"), 0o644); !errors.Is(err, ErrBadPath) {
		t.Errorf("another file at the same path = %v, want ErrBadPath", err)
	}
	if err := tr.HostFile("/b", "/nonexistent/file"); err == nil {
		t.Error("HostFile of a missing file: no error")
	}
	if _, err := WriteArchive(filepath.Join(t.TempDir(), "x.tar"), "Not A Name", nil); err == nil {
		t.Error("WriteArchive with a bad reference: no error")
	}
}
