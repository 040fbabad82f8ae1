package datapath

import (
	"fmt"
	"os"
	"strings"
)

// ReadTokenFile reads the shared token from path. Surrounding whitespace (a
// trailing newline) is ignored; an empty token is an error, because an empty
// token would let anyone in.
func ReadTokenFile(path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%w: token file: no path given; pass the file holding the shared datapath token", ErrInvalidArgument)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%w: token file %s is empty; it must hold the shared datapath token", ErrInvalidArgument, path)
	}
	if len(tok) > 4096 {
		return "", fmt.Errorf("%w: token file %s: token is %d bytes, at most 4096 allowed", ErrInvalidArgument, path, len(tok))
	}
	return tok, nil
}
