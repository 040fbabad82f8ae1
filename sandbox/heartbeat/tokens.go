package heartbeat

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
)

// nodeTokenKeyword starts each line of a node tokens file.
const nodeTokenKeyword = "node"

// ReadNodeTokens reads a node tokens file (see ParseNodeTokens).
func ReadNodeTokens(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: node tokens file: %v", ErrBadConfig, err)
	}
	defer f.Close()
	return ParseNodeTokens(f, path)
}

// ParseNodeTokens parses the tokens of a rack's nodes, one line per node in
// the datapath's tokens-file syntax:
//
//	node NODE TOKEN
//
// Blank lines and lines starting with # are ignored. Anything else, a
// controller token included (the process acts only as its nodes), a node
// named twice or a file without a node, is refused with the line's number and
// nothing of the file is used. name names the file in errors.
func ParseNodeTokens(r io.Reader, name string) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) != 3 || f[0] != nodeTokenKeyword:
			return nil, fmt.Errorf("%w: node tokens file %s line %d: %d fields starting %.32q; want `%s NODE TOKEN` (only node tokens: the heartbeat acts as its nodes, never as the controller)",
				ErrBadConfig, name, n, len(f), f[0], nodeTokenKeyword)
		case strings.Contains(f[1], ","):
			return nil, fmt.Errorf("%w: node tokens file %s line %d: node %q: want a name without commas", ErrBadConfig, name, n, f[1])
		case out[f[1]] != "":
			return nil, fmt.Errorf("%w: node tokens file %s line %d: node %s a second time; want one token per node", ErrBadConfig, name, n, f[1])
		}
		out[f[1]] = f[2]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: node tokens file %s: %v", ErrBadConfig, name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: node tokens file %s holds no node; want lines `%s NODE TOKEN`", ErrBadConfig, name, nodeTokenKeyword)
	}
	return out, nil
}

// PerNode is a Heartbeater that sends each node's heartbeat through that
// node's own client (a client authenticated with the node's token: the
// datapath lets a node's credential heartbeat only as that node).
type PerNode map[string]Heartbeater

// Heartbeat implements Heartbeater.
func (p PerNode) Heartbeat(ctx context.Context, node string) error {
	c, ok := p[node]
	if !ok {
		return fmt.Errorf("%w: no client for node %s", ErrBadConfig, node)
	}
	return c.Heartbeat(ctx, node)
}
