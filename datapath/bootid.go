package datapath

import (
	"bytes"
	"context"
	"fmt"
	"os"
)

// DefaultBootIDFile is where `vigil-datapath serve` reads its machine's boot id
// unless told otherwise (--boot-id-file): Linux makes a new one at every boot.
const DefaultBootIDFile = "/proc/sys/kernel/random/boot_id"

// BootIDMetadataKey is the gRPC response header that carries the boot id of
// the server's machine; the bulk channel carries it in the hello's answer.
const BootIDMetadataKey = "vigil-boot-id"

// MaxBootIDLen is the longest boot id a server reports (Linux's is a
// 36-character UUID).
const MaxBootIDLen = 64

// ReadBootID reads a boot id from path: one line of 1 to MaxBootIDLen
// letters, digits, '-' or '_' (surrounding white space is ignored). Anything
// else is an error that names the file and what is allowed.
func ReadBootID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: boot id: %v", ErrInvalidArgument, err)
	}
	id := string(bytes.TrimSpace(b))
	if err := CheckBootID(id); err != nil {
		return "", fmt.Errorf("boot id file %s: %w", path, err)
	}
	return id, nil
}

// CheckBootID refuses a boot id that is empty, longer than MaxBootIDLen, or
// holds anything but letters, digits, '-' and '_'.
func CheckBootID(id string) error {
	if id == "" || len(id) > MaxBootIDLen {
		return fmt.Errorf("%w: boot id %q: want 1 to %d characters", ErrInvalidArgument, id, MaxBootIDLen)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("%w: boot id %q: want letters, digits, '-' and '_' only", ErrInvalidArgument, id)
		}
	}
	return nil
}

// WithBootID makes the server report id, its machine's boot id, with every
// gRPC answer (response header BootIDMetadataKey) and in the answer to every
// bulk hello. A write the server acknowledged sits in its machine's page cache
// until a flush; a client that sees the boot id change knows that its
// acknowledged, unflushed writes may be gone (a power cut), which a process
// restart (same boot id) never loses. A server without it reports nothing,
// as servers from before boot ids did. An invalid id (CheckBootID) makes
// NewServer fail.
func WithBootID(id string) ServerOption {
	return func(s *Server) { s.bootID = id }
}

// BootID is the boot id the server reports ("" when none).
func (s *Server) BootID() string { return s.bootID }

type bootRecorderKey struct{}

// WithBootRecorder returns a context under which a datapath client records,
// in *boot, the boot id of the server that answered a call made with it: ""
// when the server reports none (one from before boot ids), unchanged when no
// server answered. Calls retried record the answer of the last attempt.
func WithBootRecorder(ctx context.Context, boot *string) context.Context {
	return context.WithValue(ctx, bootRecorderKey{}, boot)
}

// RecordBoot stores id in the recorder of ctx, if it has one (clients call it
// when a server answered; test doubles too).
func RecordBoot(ctx context.Context, id string) {
	if p, ok := ctx.Value(bootRecorderKey{}).(*string); ok {
		*p = id
	}
}

// WantsBoot reports whether ctx has a boot id recorder.
func WantsBoot(ctx context.Context) bool {
	_, ok := ctx.Value(bootRecorderKey{}).(*string)
	return ok
}
