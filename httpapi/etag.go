package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/vigil-storage/vigil/settings"
)

// ETags. A setting's ETag is a fingerprint of what a client sees of it (value,
// source, managed file). The collection's ETag is every setting's fingerprint in
// display order, so when a PATCH carries a stale collection ETag the server can
// name exactly the settings that changed since the client read them, without
// keeping any state. Both are strong ETags.

const (
	fingerprintLen   = 8 // hex digits per setting
	collectionPrefix = "c1."
	// problemsMark starts the optional last part of a collection ETag: the
	// fingerprint of the refused values still there. It tells a conditional GET
	// that the problems changed; it never makes an If-Match stale.
	problemsMark = "~"
)

func fingerprint(e settings.Entry) string {
	h := sha256.New()
	for _, s := range []string{e.Name, e.Value, string(e.Source), e.ManagedPath} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:fingerprintLen]
}

func settingETag(e settings.Entry) string { return `"` + fingerprint(e) + `"` }

func collectionETag(entries []settings.Entry) string {
	var b strings.Builder
	b.WriteString(`"` + collectionPrefix)
	for _, e := range entries {
		b.WriteString(fingerprint(e))
	}
	b.WriteString(`"`)
	return b.String()
}

// withProblems appends the problems' fingerprint to a collection ETag (none
// when there are no problems, so the ETag of a clean configuration is the
// plain one).
func withProblems(etag string, problems []settings.Problem) string {
	if len(problems) == 0 {
		return etag
	}
	h := sha256.New()
	for _, p := range problems {
		for _, s := range []string{p.Setting, string(p.Source), p.Path, p.Value, p.Message, fmt.Sprint(p.Blocking)} {
			h.Write([]byte(s))
			h.Write([]byte{0})
		}
	}
	return strings.TrimSuffix(etag, `"`) + problemsMark + hex.EncodeToString(h.Sum(nil))[:fingerprintLen] + `"`
}

// staleSettings compares an If-Match value with the current entries. It returns
// ok=false when ifMatch is no ETag this server issues; otherwise changed lists
// the settings (of those in scope: all when scope is nil) whose fingerprint
// differs. "*" matches anything.
func staleSettings(ifMatch string, entries []settings.Entry, scope map[string]bool) (changed []string, ok bool) {
	tag := strings.TrimSpace(ifMatch)
	if tag == "*" {
		return nil, true
	}
	tag = strings.TrimPrefix(tag, "W/")
	if len(tag) < 2 || tag[0] != '"' || tag[len(tag)-1] != '"' {
		return nil, false
	}
	tag = tag[1 : len(tag)-1]
	inScope := func(name string) bool { return scope == nil || scope[name] }
	if rest, isCollection := strings.CutPrefix(tag, collectionPrefix); isCollection {
		rest, _, _ = strings.Cut(rest, problemsMark)
		if len(rest) != len(entries)*fingerprintLen {
			return nil, false // another version of the registry
		}
		for i, e := range entries {
			if inScope(e.Name) && rest[i*fingerprintLen:(i+1)*fingerprintLen] != fingerprint(e) {
				changed = append(changed, e.Name)
			}
		}
		return changed, true
	}
	// A single setting's ETag is meaningful only with exactly one setting in scope.
	if len(tag) != fingerprintLen || len(scope) != 1 {
		return nil, false
	}
	for _, e := range entries {
		if scope[e.Name] && fingerprint(e) != tag {
			changed = append(changed, e.Name)
		}
	}
	return changed, true
}
