package images

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// engineRuns returns the names of the programs vigil-engine-node's source
// runs (exec.Command and exec.CommandContext); "mkfs." + fsType is "mkfs.".
func engineRuns(t *testing.T) map[string]bool {
	_, self, _, _ := runtime.Caller(0)
	files, err := filepath.Glob(filepath.Join(filepath.Dir(self), "..", "..", "engine-node", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("engine-node's source: %v (%d files)", err, len(files))
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
			i := 0
			if sel.Sel.Name == "CommandContext" {
				i = 1
			}
			if len(call.Args) <= i {
				return true
			}
			arg := call.Args[i]
			if b, ok := arg.(*ast.BinaryExpr); ok {
				arg = b.X
			}
			lit, ok := arg.(*ast.BasicLit)
			if !ok {
				t.Errorf("%s: runs a command whose name is not a literal; add it to hostTools by hand", f)
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			found[name] = true
			return true
		})
	}
	return found
}

// TestHostTools_WhatTheEngineRuns: the programs vigil-engine-node runs are
// exactly those the vigil image copies from this machine (hostTools), so a new
// one cannot be missing from the image unnoticed. "mkfs." is mkfs.<fs type>:
// ext4 is the only one the engine accepts.
func TestHostTools_WhatTheEngineRuns(t *testing.T) {
	runs := map[string]bool{}
	for _, h := range hostTools {
		for _, r := range h.runs {
			runs[strings.TrimSuffix(r, "ext4")] = true
		}
	}
	found := engineRuns(t)
	for name := range found {
		if !runs[name] {
			t.Errorf("vigil-engine-node runs %q, which the vigil image does not hold: add it to hostTools with its Debian package", name)
		}
	}
	for name := range runs {
		if !found[name] {
			t.Errorf("hostTools holds %q, which vigil-engine-node no longer runs", name)
		}
	}
}
