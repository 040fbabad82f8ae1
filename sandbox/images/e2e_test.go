package images_test

import (
	"context"
	"slices"
	"testing"

	"github.com/vigil-storage/vigil/internal/ociimage"
	"github.com/vigil-storage/vigil/internal/testenv"
	"github.com/vigil-storage/vigil/sandbox/images"
)

// TestBuild_ConformanceImages_Config is the specification of the images of
// make conformance: the references e2e.test's repo list resolves to, user,
// entrypoint, the files each must hold, and a label on each stand-in naming
// the upstream image it replaces. The jessie-dnsutils stand-in's dd is GNU's
// (the suites write with oflag=nocache, which busybox's dd refuses), run by
// Debian's dash (busybox's shell would run its own dd applet).
func TestBuild_ConformanceImages_Config(t *testing.T) {
	requireHostTools(t)
	testenv.RequireTool(t, "dd", "coreutils")
	testenv.RequireTool(t, "dash", "dash")
	testbin := standIns(t, "agnhost")
	res, err := images.Build(context.Background(), images.Options{Out: t.TempDir(), Only: images.ConformanceNames(),
		TestbinDir: testbin, Pins: pins, SourceDir: repoRoot()})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]images.Result{}
	for _, r := range res {
		got[r.Name] = r
	}
	const busyboxPath = "PATH=/bin"
	for _, w := range []struct {
		name, ref, user, standsIn string
		entrypoint, cmd, env      []string
		files, dynamic            []string
	}{
		{name: images.E2EAgnhost, ref: "localhost/e2e-test-images/agnhost:2.53", user: "0:0",
			entrypoint: []string{"/agnhost"}, cmd: []string{"pause"},
			env:   []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			files: []string{"/agnhost", "/agnhost-2", "/bin/sh", "/bin/dd", "/bin/sha256sum", "/etc/passwd", "/etc/group"}},
		{name: images.E2EBusybox, ref: "localhost/e2e-test-images/busybox:1.36.1-1", user: "0:0", cmd: []string{"/bin/sh"},
			env: []string{busyboxPath}, files: []string{"/bin/sh", "/bin/dd", "/bin/sleep", "/bin/mount"}},
		{name: images.E2ENginx, ref: "localhost/e2e-test-images/nginx:1.14-4", user: "0:0", cmd: []string{"/bin/sh"},
			env: []string{busyboxPath}, files: []string{"/bin/sh", "/bin/chmod", "/bin/ls"},
			standsIn: "registry.k8s.io/e2e-test-images/nginx:1.14-4"},
		{name: images.E2EJessieDnsutils, ref: "localhost/e2e-test-images/jessie-dnsutils:1.7", user: "0:0", cmd: []string{"/bin/sh"},
			env: []string{busyboxPath}, files: []string{"/bin/sh", "/bin/dd", "/bin/sha256sum", "/bin/base64"},
			dynamic: []string{"/bin/dd", "/bin/sh"}, standsIn: "registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7"},
	} {
		r, ok := got[w.name]
		if !ok {
			t.Errorf("%s: not built (%+v)", w.name, res)
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
		checkFiles(t, w.name, c, w.files, nil, w.dynamic)
		for _, err := range c.CheckELF() {
			t.Errorf("%s: %v", w.name, err)
		}
		if label := standInOf(t, r); label != w.standsIn {
			t.Errorf("%s: label io.vigil.stand-in-for %q, want %q", w.name, label, w.standsIn)
		}
	}
}

func standInOf(t *testing.T, r images.Result) string {
	t.Helper()
	img, err := ociimage.ReadArchive(r.File, r.Ref)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf.Config.Labels["io.vigil.stand-in-for"]
}
