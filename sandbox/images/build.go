package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/vigil-storage/vigil/internal/ociimage"
)

// Errors of Build, for a request it refuses before building anything.
var (
	// ErrUnknownImage: a name that is not one of Names().
	ErrUnknownImage = errors.New("unknown image")
	// ErrBadOptions: a bad tag, an output directory that cannot be written, a
	// missing binary or source tree.
	ErrBadOptions = errors.New("cannot build the images")
)

// Options say which images Build makes, from what, and where to.
type Options struct {
	// Out is the directory the tarballs go to (NAME.tar), created if missing.
	Out string
	// Only names the images to build (Names); empty builds every image whose
	// inputs are there, and says which it skipped and why.
	Only []string
	// Tag tags the vigil, pause and writer images; default "dev".
	Tag string
	// VigilBinDir holds the binaries of `make build` (the vigil image).
	VigilBinDir string
	// TestbinDir holds the binaries of `make testbin` (the CSI sidecars), and
	// Pins the versions of sandbox/tools/pins.env that tag them.
	TestbinDir string
	Pins       map[string]string
	// SourceDir is Vigil's module root, where the pause and writer programs
	// are compiled with Go (default "go" in PATH).
	SourceDir string
	Go        string
	// Progress gets one line per step; nil for none.
	Progress io.Writer
}

// Result is one image built, or skipped (Skipped says why).
type Result struct {
	Name, Ref, File string
	Size            int64
	Took            time.Duration
	Skipped         string
}

var tagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// plan checks o and returns the images to build and those skipped, changing
// nothing but creating o.Out.
func plan(o *Options) (build []spec, skipped []Result, err error) {
	if o.Tag == "" {
		o.Tag = "dev"
	}
	if !tagRE.MatchString(o.Tag) {
		return nil, nil, fmt.Errorf("%w: tag %q: want 1 to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'", ErrBadOptions, o.Tag)
	}
	for _, n := range o.Only {
		if !slices.Contains(Names(), n) && !slices.Contains(ConformanceNames(), n) {
			return nil, nil, unknown(n)
		}
	}
	for _, s := range all() {
		asked := slices.Contains(o.Only, s.name)
		if (len(o.Only) > 0 || slices.Contains(ConformanceNames(), s.name)) && !asked {
			continue
		}
		why := missingInput(s, *o)
		switch {
		case why == "":
			build = append(build, s)
		case asked || s.binary == "":
			return nil, nil, fmt.Errorf("%w: image %s: %s", ErrBadOptions, s.name, why)
		default:
			skipped = append(skipped, Result{Name: s.name, Skipped: why})
		}
	}
	if err := checkOut(o.Out); err != nil {
		return nil, nil, err
	}
	return build, skipped, nil
}

// missingInput says what s needs that o does not give; "" when nothing.
func missingInput(s spec, o Options) string {
	isExec := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
	}
	builtBy := s.builtBy
	if builtBy == "" {
		builtBy = "make testbin"
	}
	switch {
	case s.pin != "" && o.Pins[s.pin] == "":
		return fmt.Sprintf("sandbox/tools/pins.env pins no %s, so make testbin does not build %s yet", s.pin, s.binary)
	case s.binary != "" && !isExec(filepath.Join(o.TestbinDir, s.binary)):
		return fmt.Sprintf("%s is not in %s (run %s)", s.binary, o.TestbinDir, builtBy)
	case s.program != "":
		if _, err := os.Stat(filepath.Join(o.SourceDir, "sandbox", "images", s.program, "main.go")); err != nil {
			return fmt.Sprintf("its program is compiled from Vigil's source tree, and %q is not one (give the repository's root)", o.SourceDir)
		}
	case s.name == Vigil:
		for _, b := range vigilBinaries {
			if !isExec(filepath.Join(o.VigilBinDir, b)) {
				return fmt.Sprintf("%s is not in %q (run make build)", b, o.VigilBinDir)
			}
		}
		for _, h := range hostTools {
			if !isExec(h.path) {
				return fmt.Sprintf("%s is not on this machine (install Debian's %s)", h.path, h.pkg)
			}
		}
	}
	for _, h := range s.hosts {
		if !isExec(h.host) {
			return fmt.Sprintf("%s is not on this machine (install Debian's %s)", h.host, h.pkg)
		}
	}
	return ""
}

func checkOut(dir string) error {
	if dir == "" {
		return fmt.Errorf("%w: no output directory", ErrBadOptions)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: output directory: %v", ErrBadOptions, err)
	}
	f, err := os.CreateTemp(dir, ".write-test-*")
	if err != nil {
		return fmt.Errorf("%w: output directory %s cannot be written: %v", ErrBadOptions, dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// Build builds the images o asks for into o.Out, one docker-archive tarball
// each (NAME.tar, which `ctr images import` accepts). A bad request is refused
// before anything is built.
func Build(ctx context.Context, o Options) ([]Result, error) {
	todo, results, err := plan(&o)
	if err != nil {
		return nil, err
	}
	say := func(format string, a ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "images: "+format+"\n", a...)
		}
	}
	for _, r := range results {
		say("skip %s: %s", r.Name, r.Skipped)
	}
	progs, err := buildPrograms(ctx, o, todo, say)
	if err != nil {
		return nil, err
	}
	if progs != "" {
		defer os.RemoveAll(progs)
	}
	for i, s := range todo {
		ref := s.ref(o)
		say("[%d/%d] %s (%s) ...", i+1, len(todo), s.name, ref)
		t0 := time.Now()
		t := ociimage.NewTree()
		cfg, err := s.fill(ctx, o, progs, t)
		if err != nil {
			return results, fmt.Errorf("image %s: %w", s.name, err)
		}
		if cfg.Labels == nil {
			cfg.Labels = map[string]string{}
		}
		cfg.Labels["org.opencontainers.image.title"] = s.name
		img, err := ociimage.Build(t, cfg)
		if err != nil {
			return results, fmt.Errorf("image %s: %w", s.name, err)
		}
		file := filepath.Join(o.Out, s.name+".tar")
		size, err := ociimage.WriteArchive(file, ref, img)
		if err != nil {
			return results, fmt.Errorf("image %s: %w", s.name, err)
		}
		r := Result{Name: s.name, Ref: ref, File: file, Size: size, Took: time.Since(t0)}
		results = append(results, r)
		say("[%d/%d] %s: %s, %.1f MB, %.1fs", i+1, len(todo), s.name, file, float64(size)/1e6, r.Took.Seconds())
	}
	return results, nil
}

// buildPrograms compiles the Go programs the images in todo hold, static, in
// one go build, into a temporary directory it returns ("" when none).
func buildPrograms(ctx context.Context, o Options, todo []spec, say func(string, ...any)) (string, error) {
	var pkgs []string
	for _, s := range todo {
		if s.program != "" {
			pkgs = append(pkgs, "./sandbox/images/"+s.program)
		}
	}
	if len(pkgs) == 0 {
		return "", nil
	}
	dir, err := os.MkdirTemp("", "vigil-images-")
	if err != nil {
		return "", err
	}
	goCmd := o.Go
	if goCmd == "" {
		goCmd = "go"
	}
	say("compiling %s (CGO_ENABLED=0)", strings.Join(pkgs, " "))
	cmd := exec.CommandContext(ctx, goCmd, append([]string{"build", "-trimpath", "-ldflags=-s -w", "-o", dir + "/"}, pkgs...)...)
	cmd.Dir = o.SourceDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("compile %s: %w: %s", strings.Join(pkgs, " "), err, strings.TrimSpace(string(out)))
	}
	return dir, nil
}
