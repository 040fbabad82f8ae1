package images_test

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vigil-storage/vigil/internal/ociimage"
	"github.com/vigil-storage/vigil/internal/testenv"
	"github.com/vigil-storage/vigil/sandbox/images"
)

// repoRoot is Vigil's source tree, found from this file.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var pins = map[string]string{"EXTERNAL_PROVISIONER_VERSION": "v6.3.0", "EXTERNAL_ATTACHER_VERSION": "v4.13.0",
	"NODE_DRIVER_REGISTRAR_VERSION": "v2.14.0", "LIVENESSPROBE_VERSION": "v2.16.0"}

// requireHostTools needs what the images copy from this machine.
func requireHostTools(t *testing.T) {
	t.Helper()
	testenv.RequireTool(t, "busybox", "busybox-static")
	testenv.RequireTool(t, "mke2fs", "e2fsprogs")
	testenv.RequireTool(t, "blkid", "util-linux")
	testenv.RequireTool(t, "go", "the Go toolchain")
}

// standIns returns a directory holding a copy of Debian's static busybox under
// each name, standing in for the binaries of make build and make testbin.
func standIns(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var (
	sharedDir string // removed by TestMain
	builtOnce sync.Once
	built     map[string]images.Result
	buildErr  error
)

// buildAll builds every image once for the tests of this file, from stand-in
// binaries (a static busybox under each name).
func buildAll(t *testing.T) map[string]images.Result {
	t.Helper()
	requireHostTools(t)
	builtOnce.Do(func() {
		dir, err := os.MkdirTemp("", "vigil-images-test-")
		if err != nil {
			buildErr = err
			return
		}
		sharedDir = dir
		bins := standIns(t, "vigil-manager", "vigil-datapath", "vigil-engine-node")
		testbin := standIns(t, images.CSIProvisioner, images.CSIAttacher, images.CSIRegistrar, images.LivenessProbe)
		// The stand-ins are read while building, before this test's TempDir goes.
		res, err := images.Build(context.Background(), images.Options{Out: dir, VigilBinDir: bins,
			TestbinDir: testbin, Pins: pins, SourceDir: repoRoot()})
		built, buildErr = map[string]images.Result{}, err
		for _, r := range res {
			built[r.Name] = r
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

func readImage(t *testing.T, r images.Result) (*ociimage.Contents, ociimage.Config) {
	t.Helper()
	img, err := ociimage.ReadArchive(r.File, r.Ref)
	if err != nil {
		t.Fatalf("%s: %v", r.Name, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c, err := ociimage.Read(img)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ociimage.Config{User: cf.Config.User, Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd, Env: cf.Config.Env}
	return c, cfg
}

const vigilPath = "PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// TestBuild_EachImage_Config is the specification of each image: its
// reference, user, entrypoint, environment, the files it must hold and those
// it must not; every ELF program in it static or with its libraries present.
func TestBuild_EachImage_Config(t *testing.T) {
	res := buildAll(t)
	for _, w := range []struct {
		name, ref, user string
		entrypoint, cmd []string
		env             []string
		files, notFiles []string
		dynamic         []string // programs that must be dynamically linked (their libraries are copied)
	}{
		{name: images.Vigil, ref: "localhost/vigil:dev", user: "65532:65532",
			entrypoint: []string{"/usr/local/bin/vigil-manager"}, env: []string{vigilPath},
			files: []string{"/usr/local/bin/vigil-manager", "/usr/local/bin/vigil-datapath", "/usr/local/bin/vigil-engine-node", "/usr/sbin/blkid",
				"/usr/sbin/mke2fs", "/usr/sbin/mkfs.ext4", "/etc/mke2fs.conf", "/etc/passwd", "/etc/group"},
			notFiles: []string{"/usr/local/bin/vigil-sandbox", "/bin/sh"},
			dynamic:  []string{"/usr/sbin/blkid", "/usr/sbin/mke2fs"}},
		{name: images.Pause, ref: "localhost/vigil-pause:dev", user: "65535:65535", entrypoint: []string{"/pause"},
			files: []string{"/pause"}, notFiles: []string{"/bin/sh"}},
		{name: images.Writer, ref: "localhost/vigil-writer:dev", user: "65532:65532",
			entrypoint: []string{"/usr/local/bin/vigil-writer", "writer"}, env: []string{vigilPath},
			files: []string{"/usr/local/bin/vigil-writer"}, notFiles: []string{"/bin/sh"}},
		{name: images.Tools, ref: images.ToolsRef, user: "0:0", cmd: []string{"/bin/sh"}, env: []string{"PATH=/bin"},
			files: []string{"/bin/busybox", "/bin/sh", "/bin/echo", "/bin/ls", "/bin/cat", "/bin/mount"}},
		{name: images.CSIProvisioner, ref: "localhost/csi-provisioner:v6.3.0", user: "65532:65532",
			entrypoint: []string{"/csi-provisioner"}, files: []string{"/csi-provisioner"}},
		{name: images.CSIAttacher, ref: "localhost/csi-attacher:v4.13.0", user: "65532:65532",
			entrypoint: []string{"/csi-attacher"}, files: []string{"/csi-attacher"}},
		{name: images.CSIRegistrar, ref: "localhost/csi-node-driver-registrar:v2.14.0", user: "65532:65532",
			entrypoint: []string{"/csi-node-driver-registrar"}, files: []string{"/csi-node-driver-registrar"}},
		{name: images.LivenessProbe, ref: "localhost/livenessprobe:v2.16.0", user: "65532:65532",
			entrypoint: []string{"/livenessprobe"}, files: []string{"/livenessprobe"}},
	} {
		r, ok := res[w.name]
		if !ok || r.Skipped != "" {
			t.Errorf("%s: not built (%s)", w.name, r.Skipped)
			continue
		}
		if r.Ref != w.ref {
			t.Errorf("%s: reference %s, want %s", w.name, r.Ref, w.ref)
		}
		c, cfg := readImage(t, r)
		if cfg.User != w.user || !slices.Equal(cfg.Entrypoint, w.entrypoint) || !slices.Equal(cfg.Cmd, w.cmd) || !slices.Equal(cfg.Env, w.env) {
			t.Errorf("%s: user %q entrypoint %q cmd %q env %q; want %q %q %q %q", w.name,
				cfg.User, cfg.Entrypoint, cfg.Cmd, cfg.Env, w.user, w.entrypoint, w.cmd, w.env)
		}
		checkFiles(t, w.name, c, w.files, w.notFiles, w.dynamic)
		for _, err := range c.CheckELF() {
			t.Errorf("%s: %v", w.name, err)
		}
		if len(w.entrypoint) > 0 {
			checkFiles(t, w.name, c, w.entrypoint[:1], nil, nil)
		}
	}
}

// checkFiles: each of files is (through links) an executable or readable
// regular file owned by root, none of notFiles is there, and each of dynamic
// is an ELF program with an interpreter.
func checkFiles(t *testing.T, image string, c *ociimage.Contents, files, notFiles, dynamic []string) {
	t.Helper()
	for _, p := range files {
		r, ok := c.Resolve(p)
		f := c.Files[r]
		if !ok || f.Type != tar.TypeReg || f.UID != 0 || f.Mode&0o444 == 0 {
			t.Errorf("%s: %s is not a readable regular file of root's (resolved %q, %+v)", image, p, r, f)
		}
		if f.ELF && f.Mode&0o111 == 0 {
			t.Errorf("%s: program %s is not executable (mode %o)", image, p, f.Mode)
		}
	}
	for _, p := range notFiles {
		if _, ok := c.Resolve(p); ok {
			t.Errorf("%s: holds %s, which it should not", image, p)
		}
	}
	for _, p := range dynamic {
		r, _ := c.Resolve(p)
		if f := c.Files[r]; !f.ELF || f.Interp == "" || len(f.Needed) == 0 {
			t.Errorf("%s: %s is not a dynamically linked program as on this machine: %+v", image, p, f)
		}
	}
}

// TestBuild_Reproducible: the same inputs give the same image, byte for byte.
func TestBuild_Reproducible(t *testing.T) {
	first := buildAll(t)[images.Tools]
	requireHostTools(t)
	dir := t.TempDir()
	res, err := images.Build(context.Background(), images.Options{Out: dir, Only: []string{images.Tools}})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(first.File)
	b, _ := os.ReadFile(res[0].File)
	if len(a) == 0 || string(a) != string(b) {
		t.Errorf("two builds of the tools image differ (%d and %d bytes)", len(a), len(b))
	}
}

// TestBuild_BadInput: a refused request names what was wrong and what is
// allowed, and writes nothing.
func TestBuild_BadInput(t *testing.T) {
	requireHostTools(t)
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bins := standIns(t, "vigil-manager", "vigil-datapath", "vigil-engine-node")
	ok := images.Options{VigilBinDir: bins, TestbinDir: t.TempDir(), Pins: pins, SourceDir: repoRoot()}
	for _, c := range []struct {
		name    string
		change  func(o *images.Options)
		is      error
		mention string
	}{
		{"unknown image", func(o *images.Options) { o.Only = []string{"tools", "busybox"} }, images.ErrUnknownImage,
			`"busybox"; the images are vigil, pause, writer, tools, csi-provisioner`},
		{"conformance image unknown", func(o *images.Options) { o.Only = []string{"e2e-nginx", "e2e-perl"} }, images.ErrUnknownImage,
			"and for make conformance e2e-agnhost, e2e-busybox, e2e-nginx, e2e-jessie-dnsutils"},
		{"out under a file", func(o *images.Options) { o.Out = filepath.Join(file, "images") }, images.ErrBadOptions, "output directory"},
		{"no out", func(o *images.Options) { o.Out = "" }, images.ErrBadOptions, "no output directory"},
		{"bad tag", func(o *images.Options) { o.Tag = "-x:y" }, images.ErrBadOptions, `tag "-x:y": want 1 to 128 letters`},
		{"no make build", func(o *images.Options) { o.VigilBinDir = t.TempDir() }, images.ErrBadOptions, "vigil-manager is not in"},
		{"sidecar asked, not built", func(o *images.Options) { o.Only = []string{images.CSIAttacher} }, images.ErrBadOptions,
			"csi-attacher is not in"},
		// make conformance builds agnhost; make testbin does not.
		{"agnhost asked, not built", func(o *images.Options) { o.Only = []string{images.E2EAgnhost} }, images.ErrBadOptions,
			"agnhost is not in " + ok.TestbinDir + " (run make conformance-testbin)"},
		{"sidecar asked, not pinned", func(o *images.Options) { o.Only = []string{images.LivenessProbe}; o.Pins = nil },
			images.ErrBadOptions, "pins no LIVENESSPROBE_VERSION"},
		{"no source tree", func(o *images.Options) { o.Only = []string{images.Pause}; o.SourceDir = t.TempDir() },
			images.ErrBadOptions, "Vigil's source tree"},
	} {
		o := ok
		o.Out = filepath.Join(t.TempDir(), "out")
		c.change(&o)
		_, err := images.Build(context.Background(), o)
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: Build = %v, want %v mentioning %q", c.name, err, c.is, c.mention)
		}
		if entries, _ := os.ReadDir(o.Out); len(entries) > 0 {
			t.Errorf("%s: a refused build wrote %d files", c.name, len(entries))
		}
	}
}
