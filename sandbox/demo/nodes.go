package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/images"
)

// nodeImages are the images the demo builds for real nodes: each pod's
// sandbox, the demo pod's container, and a shell for people to look around.
var nodeImages = []string{images.Pause, images.Writer, images.Tools}

// real reports whether the demo runs on real nodes.
func (c Config) real() bool { return c.Kubelet == sandbox.KubeletReal }

// checkNodes checks Kubelet and what its nodes need (c has its defaults but
// SourceDir's): real nodes need the kubelet and kube-proxy of `make
// testbin`, Vigil's source tree (the pause and writer programs are compiled
// from it), Go, and the machine's packages of sandbox.RealNodePrerequisites.
func (c Config) checkNodes() (Config, error) {
	switch c.Kubelet {
	case sandbox.KubeletReal:
	case sandbox.KubeletKwok:
		if c.PodSubnet != "" || c.SourceDir != "" {
			return c, fmt.Errorf("%w: PodSubnet and SourceDir are for real nodes (Kubelet %q), not %q", ErrBadConfig,
				sandbox.KubeletReal, sandbox.KubeletKwok)
		}
		return c, nil
	default:
		return c, fmt.Errorf("%w: Kubelet %q: want %q (a real kubelet, containerd, CNI and kube-proxy per node, the default) or %q "+
			"(a kwok process per node, for a machine without containerd)", ErrBadConfig, c.Kubelet, sandbox.KubeletReal, sandbox.KubeletKwok)
	}
	which := "SourceDir"
	if c.SourceDir == "" {
		c.SourceDir = filepath.Dir(filepath.Clean(c.VigilBinDir)) // the checkout whose bin/ `make build` wrote
		which = "SourceDir (default: VigilBinDir's parent)"
	}
	for _, p := range nodeImages {
		if p == images.Tools {
			continue
		}
		if _, err := os.Stat(filepath.Join(c.SourceDir, "sandbox", "images", p, "main.go")); err != nil {
			return c, fmt.Errorf("%w: %s %q is not Vigil's source tree (sandbox/images/%s/main.go: %v): the demo compiles the %s image's "+
				"program from it; give the repository's root (--source)", ErrBadConfig, which, c.SourceDir, p, err, p)
		}
	}
	for _, b := range []string{sandbox.BinKubelet, sandbox.BinKubeProxy} {
		if fi, err := os.Stat(filepath.Join(c.BinDir, b)); err != nil || fi.Mode()&0o111 == 0 {
			return c, fmt.Errorf("%w: %s not in %s, and real nodes run it: run `make testbin` (or the demo with --kubelet %s)",
				sandbox.ErrBinariesMissing, b, c.BinDir, sandbox.KubeletKwok)
		}
	}
	tools := []string{goCommand()}
	for _, p := range sandbox.RealNodePrerequisites {
		tools = append(tools, p.Path)
	}
	for i, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			install := "install Go, or set GO"
			if i > 0 {
				install = "Debian: " + sandbox.RealNodePrerequisites[i-1].Install
			}
			return c, fmt.Errorf("%w: %s, which real nodes need, is not installed (%s); or run the demo with --kubelet %s",
				sandbox.ErrToolMissing, t, install, sandbox.KubeletKwok)
		}
	}
	return c, nil
}

// goCommand is the Go command that compiles the images' programs: $GO, as
// make passes it, or go.
func goCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// builtImages are the node images, built into dir.
type builtImages struct {
	dir, pause, writer string
	files              []string
}

// buildImages builds nodeImages into a new temporary directory, without a
// container engine (sandbox/images: go-containerregistry), saying what it
// does and how long it took. The caller removes dir once the nodes imported
// them (at their first boot: sandbox.Up).
func (d *demo) buildImages(ctx context.Context) (builtImages, error) {
	var b builtImages
	dir, err := os.MkdirTemp("", "vigil-demo-images-")
	if err != nil {
		return b, err
	}
	b.dir = dir
	t0 := time.Now()
	res, err := images.Build(ctx, images.Options{Out: dir, Only: nodeImages, SourceDir: d.cfg.SourceDir, Go: goCommand(),
		Progress: indent{d.cfg.Out}})
	if err != nil {
		return b, fmt.Errorf("build the node images: %w", err)
	}
	var refs []string
	for _, r := range res {
		b.files = append(b.files, r.File)
		refs = append(refs, r.Ref)
		switch r.Name {
		case images.Pause:
			b.pause = r.Ref
		case images.Writer:
			b.writer = r.Ref
		}
	}
	d.logf("node images built here in %.1fs without Docker or a registry (sandbox/images, go-containerregistry): %s; "+
		"each node's containerd imports them at its first boot", time.Since(t0).Seconds(), strings.Join(refs, ", "))
	return b, nil
}

// indent writes each line it gets (one per Write, as images.Build writes
// them) indented like the demo's progress lines.
type indent struct{ w io.Writer }

func (i indent) Write(p []byte) (int, error) {
	if _, err := i.w.Write(append([]byte("  "), p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// The demo's words for what runs each node, by Config.Kubelet.
type nodeWords struct {
	sandbox, engines, writer, published, powerCut, removed string
}

func (c Config) words() nodeWords {
	if c.real() {
		return nodeWords{
			sandbox: "etcd, kube-apiserver, kube-controller-manager, kube-scheduler; each node a real kubelet, containerd (runc), " +
				"a CNI bridge and kube-proxy, in a network namespace and cgroup of its own",
			engines: "on every node an engine, registered as its kubelet's CSI node plugin",
			writer: "the pod's container is the writer (the writer image): checksummed records appended to the volume, " +
				"each acknowledged in a ledger on the host once fsync returned",
			published: "by its kubelet, through Vigil's CSI node plugin (ext4 on a FUSE disk of the datapath)",
			powerCut:  "its kubelet, containerd, the shims, the writer's container, kube-proxy and the engine get SIGKILL (the node's whole cgroup)",
			removed:   "no process, container, cgroup, network namespace, mount or file of the sandbox",
		}
	}
	return nodeWords{
		sandbox:   "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, one kwok per node (its kubelet; no container runs)",
		engines:   "on every node an engine and a kubelet stand-in",
		writer:    "a writer on the pod's node: checksummed records appended to the volume, each acknowledged in a ledger once fsync returned",
		published: "(ext4 on a FUSE disk of the datapath)",
		powerCut:  "its kwok (the kubelet), engine, kubelet stand-in and the writer get SIGKILL",
		removed:   "no process, network namespace, mount or file of the sandbox",
	}
}
