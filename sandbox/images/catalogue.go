package images

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vigil-storage/vigil/internal/ociimage"
)

// Image names, as `vigil-sandbox images build --only` and the tarballs
// (NAME.tar) call them. The sidecars' names are those deploy/ gives them.
const (
	Vigil          = "vigil"
	Pause          = "pause"
	Writer         = "writer"
	Tools          = "tools"
	CSIProvisioner = "csi-provisioner"
	CSIAttacher    = "csi-attacher"
	CSIRegistrar   = "csi-node-driver-registrar"
	LivenessProbe  = "livenessprobe"
)

// Registry is the registry part of every image's reference: the images are
// imported, never pulled, so pods name them with imagePullPolicy Never or
// IfNotPresent.
const Registry = "localhost"

// ToolsRef is the tools image's fixed reference: Debian's busybox-static, for
// shell commands in real containers.
const ToolsRef = Registry + "/vigil-tools:latest"

// Users the images run as by default. A pod's securityContext overrides them:
// deploy/ runs the engine's container as root, because it mounts.
const (
	NonRoot   = "65532:65532"
	PauseUser = "65535:65535"
	Root      = "0:0"
)

// BinDir is where the vigil and writer images hold Vigil's binaries.
const BinDir = "/usr/local/bin"

// vigilBinaries are the binaries of `make build` that deploy/'s pods run.
var vigilBinaries = []string{"vigil-manager", "vigil-datapath", "vigil-engine-node"}

// hostTool is a program of this machine's Debian packages that
// vigil-engine-node runs at run time, copied into the vigil image with the
// shared libraries it needs.
type hostTool struct {
	path  string   // in the image and on this machine
	pkg   string   // Debian package
	links []string // other names of it, in the same directory
	runs  []string // the names vigil-engine-node runs it by
}

var hostTools = []hostTool{
	{path: "/usr/sbin/blkid", pkg: "util-linux", runs: []string{"blkid"}},
	{path: "/usr/sbin/mke2fs", pkg: "e2fsprogs", links: []string{"mkfs.ext4"}, runs: []string{"mkfs.ext4"}},
}

// hostDataFiles are read by the host tools: mke2fs's defaults.
var hostDataFiles = []string{"/etc/mke2fs.conf"}

const imagePath = "PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// spec is one image of the catalogue: its reference and how its files and
// config are made.
type spec struct {
	name string
	ref  func(o Options) string
	// fill adds the image's files to t and returns its config.
	fill func(ctx context.Context, o Options, progs string, t *ociimage.Tree) (ociimage.Config, error)
	// program is the Go program (under sandbox/images) the image holds, built
	// by Build; empty for none.
	program string
	// sidecar: the binary of `make testbin` the image holds, and the pins.env
	// key of its version ("" for none). builtBy is the command that builds
	// the binary, default make testbin.
	binary, pin, builtBy string
	// hosts are the programs of this machine the image holds, checked
	// before it is built.
	hosts []hostProgram
}

func tagged(repo string) func(Options) string {
	return func(o Options) string { return Registry + "/" + repo + ":" + o.Tag }
}

func catalogue() []spec {
	return []spec{
		{name: Vigil, ref: tagged("vigil"), fill: fillVigil},
		{name: Pause, ref: tagged("vigil-pause"), fill: fillPause, program: "pause"},
		{name: Writer, ref: tagged("vigil-writer"), fill: fillWriter, program: "writer"},
		{name: Tools, ref: func(Options) string { return ToolsRef }, fill: fillBusybox(""), hosts: []hostProgram{busyboxProgram}}, // busybox and a link per applet in /bin, run as root: a shell for looking at a node's mounts and files
		sidecar(CSIProvisioner, "EXTERNAL_PROVISIONER_VERSION"),
		sidecar(CSIAttacher, "EXTERNAL_ATTACHER_VERSION"),
		sidecar(CSIRegistrar, "NODE_DRIVER_REGISTRAR_VERSION"),
		sidecar(LivenessProbe, "LIVENESSPROBE_VERSION"),
	}
}

// all is every image Build knows: the catalogue, then the images of `make
// conformance`.
func all() []spec { return append(catalogue(), e2eCatalogue()...) }

// Names returns the name of every image `make image` builds, in build order
// (ConformanceNames has the others).
func Names() []string {
	var out []string
	for _, s := range catalogue() {
		out = append(out, s.name)
	}
	return out
}

// Ref returns the reference the image name gets when built with tag (the
// sidecars are tagged with their pinned version, the tools image "latest").
func Ref(name, tag string, pins map[string]string) (string, error) {
	for _, s := range all() {
		if s.name == name {
			return s.ref(Options{Tag: tag, Pins: pins}), nil
		}
	}
	return "", unknown(name)
}

func unknown(name string) error {
	return fmt.Errorf("%w: %q; the images are %s, and for make conformance %s", ErrUnknownImage, name,
		strings.Join(Names(), ", "), strings.Join(ConformanceNames(), ", "))
}

// etcFiles are a passwd and group naming root and the non-root user, for
// programs that look their user up.
func etcFiles(t *ociimage.Tree) error {
	if err := t.Bytes("/etc/passwd", []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"), 0o644); err != nil {
		return err
	}
	if err := t.Bytes("/etc/group", []byte("root:x:0:\nnonroot:x:65532:\n"), 0o644); err != nil {
		return err
	}
	return t.Dir("/tmp", 0o777|os.ModeSticky)
}

func fillVigil(_ context.Context, o Options, _ string, t *ociimage.Tree) (ociimage.Config, error) {
	for _, b := range vigilBinaries {
		if err := t.AddELF(filepath.Join(BinDir, b), filepath.Join(o.VigilBinDir, b)); err != nil {
			return ociimage.Config{}, err
		}
	}
	for _, h := range hostTools {
		if err := t.AddELF(h.path, h.path); err != nil {
			return ociimage.Config{}, fmt.Errorf("%w (Debian package %s)", err, h.pkg)
		}
		for _, l := range h.links {
			if err := t.Symlink(filepath.Join(filepath.Dir(h.path), l), filepath.Base(h.path)); err != nil {
				return ociimage.Config{}, err
			}
		}
	}
	for _, f := range hostDataFiles {
		if err := t.HostFile(f, f); err != nil {
			return ociimage.Config{}, err
		}
	}
	if err := etcFiles(t); err != nil {
		return ociimage.Config{}, err
	}
	return ociimage.Config{User: NonRoot, Entrypoint: []string{filepath.Join(BinDir, "vigil-manager")},
		Env: []string{imagePath}}, nil
}

func fillPause(_ context.Context, _ Options, progs string, t *ociimage.Tree) (ociimage.Config, error) {
	if err := t.AddELF("/pause", filepath.Join(progs, "pause")); err != nil {
		return ociimage.Config{}, err
	}
	return ociimage.Config{User: PauseUser, Entrypoint: []string{"/pause"}}, nil
}

func fillWriter(_ context.Context, _ Options, progs string, t *ociimage.Tree) (ociimage.Config, error) {
	if err := t.AddELF(filepath.Join(BinDir, "vigil-writer"), filepath.Join(progs, "writer")); err != nil {
		return ociimage.Config{}, err
	}
	if err := etcFiles(t); err != nil {
		return ociimage.Config{}, err
	}
	return ociimage.Config{User: NonRoot, Entrypoint: []string{filepath.Join(BinDir, "vigil-writer"), "writer"},
		Env: []string{imagePath}}, nil
}

// busybox is where Debian's busybox-static installs its one binary.
const busybox = "/bin/busybox"

// busyboxTree adds Debian's busybox-static and a link to it in /bin per
// applet, but for the paths in skip.
func busyboxTree(ctx context.Context, t *ociimage.Tree, skip ...string) error {
	if err := t.AddELF(busybox, busybox); err != nil {
		return fmt.Errorf("%w (Debian package busybox-static)", err)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, busybox, "--list")
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("list busybox's applets (%s --list): %w", busybox, err)
	}
	for _, applet := range strings.Fields(out.String()) {
		if applet == "busybox" || strings.Contains(applet, "/") || slices.Contains(skip, "/bin/"+applet) {
			continue
		}
		if err := t.Symlink("/bin/"+applet, "busybox"); err != nil {
			return err
		}
	}
	return nil
}

// sidecar is an upstream CSI sidecar built by `make testbin`, at /NAME as in
// the upstream images (deploy/ gives it only args).
func sidecar(name, pin string) spec {
	return spec{name: name, binary: name, pin: pin,
		ref: func(o Options) string { return Registry + "/" + name + ":" + o.Pins[pin] },
		fill: func(_ context.Context, o Options, _ string, t *ociimage.Tree) (ociimage.Config, error) {
			if err := t.AddELF("/"+name, filepath.Join(o.TestbinDir, name)); err != nil {
				return ociimage.Config{}, err
			}
			return ociimage.Config{User: NonRoot, Entrypoint: []string{"/" + name}}, nil
		}}
}
