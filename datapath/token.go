package datapath

import (
	"fmt"
	"os"
	"strings"
)

// ReadTokenFile reads a client's own token from path: a static token from the
// tokens file's line for this caller, or a projected ServiceAccount token.
// Surrounding whitespace (a trailing newline) is ignored; an empty token is an
// error, and so is one longer than MaxTokenLen.
func ReadTokenFile(path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%w: token file: no path given; pass the file holding this caller's datapath token", ErrInvalidArgument)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%w: token file %s is empty; it must hold this caller's datapath token", ErrInvalidArgument, path)
	}
	if len(tok) > MaxTokenLen {
		return "", fmt.Errorf("%w: token file %s: token is %d bytes, at most %d allowed", ErrInvalidArgument, path, len(tok), MaxTokenLen)
	}
	return tok, nil
}
