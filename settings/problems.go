package settings

import (
	"errors"
	"slices"
	"strings"
)

// A refused value keeps the last good one in force. After a restart there is no
// last good one: the value in force is then the store's or the default, not the
// one given, and a managed dry-run=ture would silently act. Such a refusal
// blocks acting: ActBlocked names it until it is fixed, while everything else
// (the CLI, the API, the accessors) keeps working.

// Problem is a value Vigil refused, as the CLI, the API, /readyz and Events show
// it.
type Problem struct {
	// Setting is the setting the value was for; "" for an overlay file that
	// names no setting.
	Setting string `json:"setting,omitempty"`
	// Source is where the value came from: SourceManaged (an overlay file) or
	// SourceStore.
	Source Source `json:"source"`
	// Path is the overlay file; "" for the store.
	Path string `json:"path,omitempty"`
	// Value is the refused content, whole ("" for an unreadable file).
	Value string `json:"value"`
	// Allowed says what the setting accepts; for an overlay file that names no
	// setting, which names are settings.
	Allowed string `json:"allowed"`
	// Message is the refusal in one line, with the value shortened (Echo).
	Message string `json:"message"`
	// Blocking: no good value came from this source since this process started
	// (or the file names no setting), so the value in force is not the one
	// given. ActBlocked reports every blocking problem.
	Blocking bool `json:"blocking"`
}

// refusal is a value refused from one source, as kept until it changes.
type refusal struct {
	path    string // the overlay file; "" for the store
	raw     string // identifies the content, to report each bad content once
	value   string // the content as read
	err     error  // why it was refused
	message string // one line for people
}

// ErrActBlocked: a refused value leaves a setting with a value in force that is
// not the one given; ActBlocked returns a *BlockedError wrapping it.
var ErrActBlocked = errors.New("not acting: a settings value was refused and no good value stands in for it")

// BlockedError lists the problems that block acting.
type BlockedError struct {
	Problems []Problem // each with Blocking set, in name order
}

func (e *BlockedError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Message
	}
	return "not acting until fixed, because the value in force is not the one given: " + strings.Join(msgs, "; ")
}

// Is makes errors.Is(err, ErrActBlocked) true.
func (e *BlockedError) Is(target error) bool { return target == ErrActBlocked }

// Problems returns every refused value that is still there: the overlay files
// and store values refused, with whether each blocks acting. Sorted by setting
// (files that name no setting first), then source.
func (s *Settings) Problems() []Problem {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Problem
	for _, r := range s.unknownFiles {
		out = append(out, problemOf(r, "", SourceManaged, "a file named after a setting: "+strings.Join(Names(), ", "), true))
	}
	for name, mk := range s.managed {
		if mk.refused != nil {
			out = append(out, problemOf(mk.refused, name, SourceManaged, byName[name].Allowed(), mk.good == nil))
		}
	}
	for name, r := range s.storeProblem {
		out = append(out, problemOf(r, name, SourceStore, byName[name].Allowed(), s.storeBlockingLocked(name)))
	}
	slices.SortFunc(out, func(a, b Problem) int {
		return strings.Compare(a.Setting+"\x00"+string(a.Source)+"\x00"+a.Path, b.Setting+"\x00"+string(b.Source)+"\x00"+b.Path)
	})
	return out
}

func problemOf(r *refusal, setting string, src Source, allowed string, blocking bool) Problem {
	return Problem{Setting: setting, Source: src, Path: r.path, Value: r.value, Allowed: allowed,
		Message: r.message, Blocking: blocking}
}

// storeBlockingLocked: the store's value of name was refused and neither a good
// store value seen earlier nor a good overlay value stands in for it.
func (s *Settings) storeBlockingLocked(name string) bool {
	if s.storeProblem[name] == nil {
		return false
	}
	if _, ok := s.stored[name]; ok {
		return false
	}
	mk, managed := s.managed[name]
	return !managed || mk.good == nil
}

// ActBlocked returns nil when every setting's value in force is the one given,
// and otherwise a *BlockedError (errors.Is ErrActBlocked) naming each refused
// value that no good value stands in for: an overlay file or store value that
// was bad from the start of this process, or an overlay file that names no
// setting. Controllers call it before acting and do nothing while it is non-nil;
// vigil-manager run fails /readyz with its message. A refused value that
// arrives later, after a good one, does not block: the good one stays in force.
func (s *Settings) ActBlocked() error {
	var blocking []Problem
	for _, p := range s.Problems() {
		if p.Blocking {
			blocking = append(blocking, p)
		}
	}
	if len(blocking) == 0 {
		return nil
	}
	return &BlockedError{Problems: blocking}
}

// ProblemsChanged returns a channel that is closed the next time Problems or
// ActBlocked may answer differently. Take the channel before reading them, so
// that no change falls between:
//
//	for {
//		changed := s.ProblemsChanged()
//		report(s.ActBlocked())
//		select { case <-ctx.Done(): return; case <-changed: }
//	}
func (s *Settings) ProblemsChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.problemsCh
}

// problemsMayHaveChangedLocked wakes whoever waits on ProblemsChanged.
func (s *Settings) problemsMayHaveChangedLocked() {
	close(s.problemsCh)
	s.problemsCh = make(chan struct{})
}
