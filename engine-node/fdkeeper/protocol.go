package fdkeeper

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// Operations.
const (
	OpPut  = "put"
	OpGet  = "get"
	OpDrop = "drop"
	OpList = "list"
)

// Limits of a request.
const (
	MaxVolumeLen = 256
	MaxMetaLen   = 4096
	maxMessage   = 64 << 10
	maxFds       = 4 // more than one is refused; room to see and close extras
)

// Error codes of an answer.
const (
	codeBadRequest = "bad-request"
	codeNotFound   = "not-found"
	codeInternal   = "internal"
)

// Sentinel errors a Client returns.
var (
	// ErrNotFound: the keeper holds no descriptor for the volume.
	ErrNotFound = errors.New("no descriptor held for the volume")
	// ErrBadRequest: the keeper refused the request and changed nothing.
	ErrBadRequest = errors.New("request refused")
)

// request is one message to the keeper.
type request struct {
	Op     string          `json:"op"`
	Volume string          `json:"volume,omitempty"`
	Meta   json.RawMessage `json:"meta,omitempty"`
}

// Entry is one held descriptor as list reports it.
type Entry struct {
	Volume string          `json:"volume"`
	Meta   json.RawMessage `json:"meta"`
}

// answer is one message from the keeper.
type answer struct {
	Error   string          `json:"error,omitempty"`
	Code    string          `json:"code,omitempty"`
	Meta    json.RawMessage `json:"meta,omitempty"`
	Entries []Entry         `json:"entries,omitempty"`
}

// checkVolume refuses an empty, overlong or unprintable volume id.
func checkVolume(v string) error {
	if v == "" || len(v) > MaxVolumeLen {
		return fmt.Errorf("volume %q: want 1 to %d bytes", v, MaxVolumeLen)
	}
	if i := strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) || r == ' ' }); i >= 0 {
		return fmt.Errorf("volume %q: byte %d is a space or not printable", v, i)
	}
	return nil
}

// checkMeta refuses metadata that is not one JSON object of at most MaxMetaLen bytes.
func checkMeta(m json.RawMessage) error {
	if len(m) == 0 || len(m) > MaxMetaLen {
		return fmt.Errorf("meta of %d bytes: want a JSON object of 1 to %d bytes", len(m), MaxMetaLen)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(m, &obj); err != nil || obj == nil {
		return fmt.Errorf("meta %.40q: want a JSON object", m)
	}
	return nil
}
