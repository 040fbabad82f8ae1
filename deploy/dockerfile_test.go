package deploy_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/deploy/deploytest"
)

// engineTools are the programs vigil-engine-node runs, with the Debian package
// that provides each in the image ("mkfs." is mkfs.<fstype>, ext4 only).
var engineTools = map[string]string{"blkid": "util-linux", "mkfs.": "e2fsprogs"}

// dockerStage is one FROM … stage of a Dockerfile: its base image, name and
// instructions (continuation lines joined).
type dockerStage struct {
	from, name string
	lines      []string
}

func parseDockerfile(text string) ([]dockerStage, error) {
	text = strings.ReplaceAll(text, "\\\n", " ")
	var stages []dockerStage
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if strings.EqualFold(f[0], "FROM") {
			s := dockerStage{from: f[1]}
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				s.name = f[3]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			return nil, fmt.Errorf("line %d: %q before the first FROM", i+1, line)
		}
		stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
	}
	if len(stages) < 2 {
		return nil, fmt.Errorf("%d stages, want a build stage and a runtime stage", len(stages))
	}
	return stages, nil
}

// checkDockerfile returns every way text fails to build what `make build`
// builds into a non-root image: bins are the binaries, goVersion go.mod's go
// directive.
func checkDockerfile(text string, bins []string, goVersion string) []error {
	stages, err := parseDockerfile(text)
	if err != nil {
		return []error{err}
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	build, final := stages[0], stages[len(stages)-1]
	parts := strings.Split(goVersion, ".")
	if want := "golang:" + strings.Join(parts[:min(2, len(parts))], "."); !strings.HasPrefix(build.from, want) {
		bad("build stage FROM %s: want %s (go.mod says go %s)", build.from, want, goVersion)
	}
	if !slices.ContainsFunc(build.lines, func(l string) bool { return regexp.MustCompile(`^RUN make build( |$)`).MatchString(l) }) {
		bad("the build stage must RUN make build, so the image holds what `make build` builds")
	}
	copied := false
	for _, l := range final.lines {
		f := strings.Fields(l)
		if strings.EqualFold(f[0], "COPY") && len(f) == 4 && f[1] == "--from="+build.name && f[2] == "/src/bin/" && f[3] == binDir+"/" {
			copied = true
		}
	}
	if !copied {
		bad("the runtime stage must COPY --from=%s /src/bin/ %s/ (every binary of `make build`)", build.name, binDir)
	}
	user := ""
	for _, l := range final.lines {
		if f := strings.Fields(l); strings.EqualFold(f[0], "USER") {
			user = f[1]
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		bad("USER %q: want a numeric non-root user (the manifests run as 65532)", user)
	}
	for _, m := range regexp.MustCompile(regexp.QuoteMeta(binDir)+`/([A-Za-z0-9._-]+)`).FindAllStringSubmatch(text, -1) {
		if !slices.Contains(bins, m[1]) {
			bad("%s/%s is not a binary of `make build` (%v)", binDir, m[1], bins)
		}
	}
	if !slices.ContainsFunc(final.lines, func(l string) bool { return strings.HasPrefix(l, "ENTRYPOINT") }) {
		bad("no ENTRYPOINT")
	}
	install := strings.Join(final.lines, "\n")
	for tool, pkg := range engineTools {
		if !regexp.MustCompile(`apt-get install[^\n]*\b` + regexp.QuoteMeta(pkg) + `\b`).MatchString(install) {
			bad("the runtime stage does not install %s, which vigil-engine-node needs for %s", pkg, tool)
		}
	}
	return errs
}

// TestDockerfile_Build_OnlyMakeBuildBinaries: no container
// engine runs here, so the Dockerfile is kept honest by reading it.
func TestDockerfile_Build_OnlyMakeBuildBinaries(t *testing.T) {
	gomod := readFile(t, "go.mod")
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	for _, err := range checkDockerfile(readFile(t, "Dockerfile"), binaries(t), m[1]) {
		t.Error(err)
	}
	if mk := readFile(t, "Makefile"); !strings.Contains(mk, "BINARIES  := $(notdir $(wildcard cmd/*))") ||
		!strings.Contains(mk, "-o $(BIN)/ $(addprefix ./cmd/,$(BINARIES))") || !strings.Contains(mk, "BIN       := bin\n") {
		t.Errorf("the Makefile's build target changed: check that it still builds every cmd/* into bin/, as the Dockerfile assumes, and update this test")
	}
}

// TestDockerfile_EngineTools_Known: the programs vigil-engine-node executes are
// exactly those engineTools knows, so a new one cannot be missing from the
// image unnoticed.
func TestDockerfile_EngineTools_Known(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(filepath.Dir(deploytest.Dir()), "engine-node", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Command" && sel.Sel.Name != "CommandContext") {
				return true
			}
			arg := call.Args[0]
			if sel.Sel.Name == "CommandContext" {
				arg = call.Args[1]
			}
			if b, ok := arg.(*ast.BinaryExpr); ok {
				arg = b.X // "mkfs." + fsType
			}
			lit, ok := arg.(*ast.BasicLit)
			if !ok {
				t.Errorf("%s: a command whose name is not a literal; add it to engineTools by hand", f)
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			found[name] = true
			if engineTools[name] == "" {
				t.Errorf("%s runs %q, which engineTools does not know: add it with its Debian package and install it in the Dockerfile", f, name)
			}
			return true
		})
	}
	for tool := range engineTools {
		if !found[tool] {
			t.Errorf("engineTools lists %q, which vigil-engine-node no longer runs", tool)
		}
	}
}

func TestCheckDockerfile_BadInput(t *testing.T) {
	bins := []string{"vigil-manager", "vigil-engine-node", "vigil-sandbox"}
	good := readFile(t, "Dockerfile")
	if errs := checkDockerfile(good, bins, "1.26.0"); len(errs) > 0 {
		t.Fatalf("the Dockerfile as shipped: %v", errs)
	}
	for name, text := range map[string]string{
		"a binary make build does not build": strings.Replace(good, "/usr/local/bin/vigil-manager", "/usr/local/bin/vigil-ctl", 1),
		"root":                               strings.Replace(good, "USER 65532:65532", "USER 0", 1),
		"no user":                            strings.Replace(good, "USER 65532:65532", "", 1),
		"go build instead of make build":     strings.Replace(good, "RUN make build", "RUN go build ./cmd/vigil-manager", 1),
		"one binary copied":                  strings.Replace(good, "/src/bin/ /usr/local/bin/", "/src/bin/vigil-manager /usr/local/bin/", 1),
		"no mkfs":                            strings.Replace(good, "e2fsprogs util-linux", "util-linux", 1),
		"old Go":                             strings.Replace(good, "golang:1.26", "golang:1.22", 1),
		"one stage":                          "FROM golang:1.26\nRUN make build\n",
		"nothing":                            "",
	} {
		if errs := checkDockerfile(text, bins, "1.26.0"); len(errs) == 0 {
			t.Errorf("%s: not noticed", name)
		}
	}
}
