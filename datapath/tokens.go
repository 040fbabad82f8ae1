package datapath

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
)

// Static tokens: the datapath's credentials for the sandbox and for a single
// machine, one token per role and per node, never one for all.

// Token lengths a tokens file and a client's token file accept.
const (
	// MinTokenLen is the shortest static token: 16 bytes (128 bits as hex is
	// 32; 16 keeps a guessable word out).
	MinTokenLen = 16
	// MaxTokenLen is the longest token (a ServiceAccount JWT is ~1 KiB).
	MaxTokenLen = 4096
)

// Keywords of a tokens file's lines.
const (
	tokensController = "controller"
	tokensNode       = "node"
)

// StaticTokens is an Authenticator with a fixed table of tokens: each maps to
// the controller role or to one node's engine. Tokens are kept as SHA-256
// digests; a lookup hashes the presented token first, so neither its length
// nor its content steers the comparison.
type StaticTokens struct {
	byDigest map[[sha256.Size]byte]Identity
	nodes    int
	ctrls    int
}

// ReadTokensFile reads a tokens file: one credential per line,
//
//	controller TOKEN
//	node NODE TOKEN
//
// Blank lines and lines starting with # are ignored. Several controller lines
// (the manager's and the CSI controller's) and several tokens for one node (a
// rotation) are allowed; one token on two lines is not, nor a bare token (the
// shared token of old). A bad line is refused with its number and what is
// allowed; nothing of the file is used then.
func ReadTokensFile(path string) (*StaticTokens, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: tokens file: no path given", ErrInvalidArgument)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	defer f.Close()
	return ParseTokens(f, path)
}

// ParseTokens parses the lines of a tokens file (see ReadTokensFile); name
// names it in errors.
func ParseTokens(r io.Reader, name string) (*StaticTokens, error) {
	t := &StaticTokens{byDigest: map[[sha256.Size]byte]Identity{}}
	lineOf := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, tok, err := parseTokenLine(strings.Fields(line), name, n)
		if err != nil {
			return nil, err
		}
		d := sha256.Sum256([]byte(tok))
		if first, dup := lineOf[d]; dup {
			return nil, fmt.Errorf("%w: tokens file %s line %d: the token of line %d again; every role and node needs a token of its own",
				ErrInvalidArgument, name, n, first)
		}
		lineOf[d] = n
		t.byDigest[d] = id
		if id.Role == RoleController {
			t.ctrls++
		} else {
			t.nodes++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: tokens file %s: %v (a line may be at most 64 KiB)", ErrInvalidArgument, name, err)
	}
	if len(t.byDigest) == 0 {
		return nil, fmt.Errorf("%w: tokens file %s holds no token; want lines `%s TOKEN` and `%s NODE TOKEN`",
			ErrInvalidArgument, name, tokensController, tokensNode)
	}
	return t, nil
}

func parseTokenLine(f []string, name string, n int) (Identity, string, error) {
	bad := func(why string, args ...any) error {
		return fmt.Errorf("%w: tokens file %s line %d: %s; want `%s TOKEN` or `%s NODE TOKEN`",
			ErrInvalidArgument, name, n, fmt.Sprintf(why, args...), tokensController, tokensNode)
	}
	var id Identity
	var tok string
	switch {
	case len(f) == 1:
		return id, "", bad("a bare token: the datapath no longer takes one shared token for every caller")
	case f[0] == tokensController && len(f) == 2:
		id, tok = Identity{Role: RoleController, Name: fmt.Sprintf("controller token, line %d of %s", n, name)}, f[1]
	case f[0] == tokensNode && len(f) == 3:
		if err := validNode(f[1]); err != nil {
			return id, "", bad("%v", err)
		}
		id, tok = Identity{Role: RoleEngine, Node: f[1], Name: fmt.Sprintf("node token, line %d of %s", n, name)}, f[2]
	case f[0] == tokensController || f[0] == tokensNode:
		return id, "", bad("%d fields after %q", len(f)-1, f[0])
	default:
		return id, "", bad("unknown kind %.32q", f[0])
	}
	if err := checkToken(tok); err != nil {
		return id, "", bad("%v", err)
	}
	return id, tok, nil
}

// checkToken checks a token's shape: MinTokenLen to MaxTokenLen printable
// bytes without white space.
func checkToken(tok string) error {
	switch {
	case len(tok) < MinTokenLen:
		return fmt.Errorf("the token is %d bytes; at least %d are needed", len(tok), MinTokenLen)
	case len(tok) > MaxTokenLen:
		return fmt.Errorf("the token is %d bytes; at most %d are allowed", len(tok), MaxTokenLen)
	case strings.ContainsFunc(tok, func(r rune) bool { return r > unicode.MaxASCII || !unicode.IsGraphic(r) || unicode.IsSpace(r) }):
		return fmt.Errorf("the token holds a byte that is not printable ASCII")
	}
	return nil
}

// Authenticate implements Authenticator.
func (t *StaticTokens) Authenticate(_ context.Context, token string) (Identity, error) {
	if id, ok := t.byDigest[sha256.Sum256([]byte(token))]; ok {
		return id, nil
	}
	return Identity{}, fmt.Errorf("%w: unknown token: it is not in the datapath's tokens file", ErrUnauthenticated)
}

// Counts reports how many controller and node tokens the table holds.
func (t *StaticTokens) Counts() (controllers, nodes int) { return t.ctrls, t.nodes }

// TokenEntry is one line of a tokens file: the controller's token when
// Node is empty, else the token of that node's engine.
type TokenEntry struct{ Node, Token string }

// FormatTokens renders a tokens file (for the sandbox and tests that write
// one); ParseTokens reads it back.
func FormatTokens(entries []TokenEntry) string {
	var b strings.Builder
	b.WriteString("# datapath tokens: `controller TOKEN` and `node NODE TOKEN`, one credential per line\n")
	for _, e := range entries {
		if e.Node == "" {
			fmt.Fprintf(&b, "%s %s\n", tokensController, e.Token)
		} else {
			fmt.Fprintf(&b, "%s %s %s\n", tokensNode, e.Node, e.Token)
		}
	}
	return b.String()
}
