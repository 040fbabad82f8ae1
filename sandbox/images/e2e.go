package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vigil-storage/vigil/internal/ociimage"
)

// The images of `make conformance`, the upstream storage end-to-end suite
// (e2e.test). They are built only when named (--only, or every one with
// ConformanceNames), never by a plain `make image`. e2e.test finds them
// through a repo list (KUBE_TEST_REPO_LIST) that moves its
// promoterE2eRegistry to E2ERegistry; the names and versions are those of
// test/utils/image/manifest.go at the pinned k8s.io/kubernetes, which
// test/conformance/run.sh checks against `e2e.test --list-images` before a
// run.
const (
	// E2EAgnhost: the agnhost program built from its Go source in the
	// k8s.io/kubernetes module (`testbin.sh conformance`), with Debian's
	// busybox-static for the shell commands the tests run in it.
	E2EAgnhost = "e2e-agnhost"
	// E2EBusybox: Debian's busybox-static, e2e.test's default test image.
	E2EBusybox = "e2e-busybox"
	// E2ENginx and E2EJessieDnsutils are busybox too, under the references of
	// two upstream images that cannot be built here (nginx; Debian jessie with
	// dnsutils). The storage suites only run shell commands in them (a script
	// on the volume; dd and sha256sum); the jessie-dnsutils one adds Debian's
	// GNU dd and, to run it, dash as /bin/sh, because the suites' block writes
	// use dd oflag=nocache, which busybox's dd lacks. Each says so in its
	// labels.
	E2ENginx          = "e2e-nginx"
	E2EJessieDnsutils = "e2e-jessie-dnsutils"
)

// E2ERegistry is where the repo list of `make conformance` puts e2e.test's
// promoterE2eRegistry (registry.k8s.io/e2e-test-images upstream).
const E2ERegistry = Registry + "/e2e-test-images"

// agnhostBinary is the binary `testbin.sh conformance` builds into the
// testbin directory.
const agnhostBinary = "agnhost"

// hostProgram is a program of this machine put into an image at a path of
// its own.
type hostProgram struct{ at, host, pkg string }

// gnuDD is Debian coreutils' dd, and dash Debian's shell, for the
// jessie-dnsutils stand-in: busybox's shell runs its own dd applet whatever
// PATH says, so the GNU dd needs a shell that looks it up.
var (
	busyboxProgram = hostProgram{at: busybox, host: busybox, pkg: "busybox-static"}
	gnuDD          = hostProgram{at: "/bin/dd", host: "/usr/bin/dd", pkg: "coreutils"}
	dash           = hostProgram{at: "/bin/sh", host: "/usr/bin/dash", pkg: "dash"}
)

// standInLabel names, in an image's labels, the upstream image a busybox
// image stands in for.
const standInLabel = "io.vigil.stand-in-for"

func e2eCatalogue() []spec {
	e2e := func(repo, version string) func(Options) string {
		return func(Options) string { return E2ERegistry + "/" + repo + ":" + version }
	}
	return []spec{
		{name: E2EAgnhost, ref: e2e("agnhost", "2.53"), fill: fillAgnhost, binary: agnhostBinary, builtBy: "make conformance-testbin",
			hosts: []hostProgram{busyboxProgram}},
		{name: E2EBusybox, ref: e2e("busybox", "1.36.1-1"), fill: fillBusybox(""), hosts: []hostProgram{busyboxProgram}},
		{name: E2ENginx, ref: e2e("nginx", "1.14-4"), fill: fillBusybox("registry.k8s.io/e2e-test-images/nginx:1.14-4"),
			hosts: []hostProgram{busyboxProgram}},
		{name: E2EJessieDnsutils, ref: e2e("jessie-dnsutils", "1.7"),
			fill:  fillBusybox("registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7", gnuDD, dash),
			hosts: []hostProgram{gnuDD, dash}},
	}
}

// ConformanceNames are the images of `make conformance`, which Build makes
// only when Options.Only names them.
func ConformanceNames() []string {
	var out []string
	for _, s := range e2eCatalogue() {
		out = append(out, s.name)
	}
	return out
}

// fillBusybox makes busybox's image; with standsIn, one that stands in for
// that upstream image, with the programs extra of this machine in place of
// busybox's applets.
func fillBusybox(standsIn string, extra ...hostProgram) func(context.Context, Options, string, *ociimage.Tree) (ociimage.Config, error) {
	return func(ctx context.Context, _ Options, _ string, t *ociimage.Tree) (ociimage.Config, error) {
		var skip []string
		for _, e := range extra {
			skip = append(skip, e.at)
		}
		if err := busyboxTree(ctx, t, skip...); err != nil {
			return ociimage.Config{}, err
		}
		if err := etcFiles(t); err != nil {
			return ociimage.Config{}, err
		}
		for _, e := range extra {
			if err := t.AddELF(e.at, e.host); err != nil {
				return ociimage.Config{}, fmt.Errorf("%w (Debian package %s)", err, e.pkg)
			}
		}
		cfg := ociimage.Config{User: Root, Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}}
		if standsIn != "" {
			cfg.Labels = map[string]string{standInLabel: standsIn}
		}
		return cfg, nil
	}
}

// fillAgnhost makes agnhost's image as upstream's Dockerfile lays it out
// (/agnhost, /agnhost-2, /uploads, the user and group it defines, entrypoint
// /agnhost, command pause, root), on busybox instead of Alpine: no curl,
// iperf, bind-tools or coredns, which the storage suites do not run.
func fillAgnhost(ctx context.Context, o Options, _ string, t *ociimage.Tree) (ociimage.Config, error) {
	if err := t.AddELF("/agnhost", filepath.Join(o.TestbinDir, agnhostBinary)); err != nil {
		return ociimage.Config{}, err
	}
	if err := t.Symlink("/agnhost-2", "agnhost"); err != nil {
		return ociimage.Config{}, err
	}
	if err := t.Dir("/uploads", 0o755); err != nil {
		return ociimage.Config{}, err
	}
	if err := busyboxTree(ctx, t); err != nil {
		return ociimage.Config{}, err
	}
	if err := t.Dir("/tmp", 0o777|os.ModeSticky); err != nil {
		return ociimage.Config{}, err
	}
	// Upstream adds this user and group; tests may look them up.
	if err := t.Bytes("/etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"+
		"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"), 0o644); err != nil {
		return ociimage.Config{}, err
	}
	if err := t.Bytes("/etc/group", []byte("root:x:0:\nnonroot:x:65532:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"), 0o644); err != nil {
		return ociimage.Config{}, err
	}
	return ociimage.Config{User: Root, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"},
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}, nil
}
