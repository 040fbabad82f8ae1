package datapath

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseTokens_RolesPerLine(t *testing.T) {
	st, err := ParseTokens(strings.NewReader(`# the manager and the CSI controller
controller manager-token-0123456

controller csi-controller-token-01
  node node-a  node-a-token-0123456
node node-a node-a-rotated-token-0
node node-b node-b-token-0123456
`), "tokens")
	if err != nil {
		t.Fatal(err)
	}
	if c, n := st.Counts(); c != 2 || n != 3 {
		t.Fatalf("Counts() = %d, %d; want 2 controller, 3 node tokens", c, n)
	}
	ctx := context.Background()
	for tok, want := range map[string]Identity{
		"manager-token-0123456":   {Role: RoleController, Name: "controller token, line 2 of tokens"},
		"csi-controller-token-01": {Role: RoleController, Name: "controller token, line 4 of tokens"},
		"node-a-token-0123456":    {Role: RoleEngine, Node: "node-a", Name: "node token, line 5 of tokens"},
		"node-a-rotated-token-0":  {Role: RoleEngine, Node: "node-a", Name: "node token, line 6 of tokens"},
		"node-b-token-0123456":    {Role: RoleEngine, Node: "node-b", Name: "node token, line 7 of tokens"},
	} {
		if id, err := st.Authenticate(ctx, tok); err != nil || id != want {
			t.Errorf("%s: %+v, %v; want %+v", tok, id, err, want)
		}
	}
	for _, tok := range []string{"", "node-b", "node-b-token-012345", "node-b-token-01234567", "NODE-B-TOKEN-0123456"} {
		if _, err := st.Authenticate(ctx, tok); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%q: %v; want ErrUnauthenticated", tok, err)
		}
	}
}

func TestParseTokens_BadLinesNameTheLine(t *testing.T) {
	for _, tc := range []struct {
		name, file, mention string
	}{
		{"empty", "", "holds no token"},
		{"comments only", "# nothing\n\n", "holds no token"},
		{"a bare shared token", "s3cret-shared-token-of-old\n", "line 1: a bare token"},
		{"unknown kind", "controller c-token-0123456789\nadmin a-token-0123456789\n", `line 2: unknown kind "admin"`},
		{"controller with a node", "controller node-a c-token-0123456789\n", `line 1: 2 fields after "controller"`},
		{"node without a node name", "node n-token-0123456789\n", `line 1: 1 fields after "node"`},
		{"short token", "node node-a short\n", "line 1: the token is 5 bytes; at least 16"},
		{"long token", "controller " + strings.Repeat("x", MaxTokenLen+1) + "\n", "at most 4096"},
		{"non-ASCII token", "controller tökén-0123456789abc\n", "not printable ASCII"},
		{"bad node name", "node node\x01a n-token-0123456789\n", "line 1: datapath: invalid argument: node"},
		{"long node name", "node " + strings.Repeat("n", MaxNodeLen+1) + " n-token-0123456789\n", "at most 253"},
		{"one token twice", "controller same-token-0123456789\n\nnode node-a same-token-0123456789\n", "line 3: the token of line 1 again"},
		{"overlong line", "controller " + strings.Repeat("y", 70<<10) + "\n", "at most 64 KiB"},
	} {
		st, err := ParseTokens(strings.NewReader(tc.file), "tokens")
		if st != nil || !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v; want ErrInvalidArgument mentioning %q", tc.name, err, tc.mention)
		}
		if err != nil && strings.Contains(tc.file, "-token-") && strings.Contains(err.Error(), "token-0123456789") {
			t.Errorf("%s: the error shows the token: %v", tc.name, err)
		}
	}
}

func TestReadTokensFile_PathProblems(t *testing.T) {
	if _, err := ReadTokensFile(""); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("no path: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	if _, err := ReadTokensFile(missing); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
}

func TestFormatTokens_ReadsBack(t *testing.T) {
	text := FormatTokens([]TokenEntry{{Token: "controller-token-0123"}, {Node: "node-a", Token: "node-a-token-0123456"}})
	st, err := ParseTokens(strings.NewReader(text), "formatted")
	if err != nil {
		t.Fatal(err)
	}
	if id, err := st.Authenticate(context.Background(), "node-a-token-0123456"); err != nil || id.Node != "node-a" {
		t.Fatalf("%+v, %v", id, err)
	}
}
