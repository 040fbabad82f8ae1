package settings

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// The managed overlay is a directory with one file per setting, named after the
// setting and holding its value: what a ConfigMap mounted as a volume looks like.
// Kubernetes writes such a volume atomically: the files live in a timestamped
// directory (..2026_11_20_23_59_59.123456789), a symlink ..data points at it, and
// each key is a symlink KEY -> ..data/KEY. An update writes a new timestamped
// directory, points a temporary symlink at it and renames that over ..data, then
// removes the old directory. Names starting with "." are therefore never keys, and
// the whole directory is re-read after every event, following the symlinks.

// overlayDebounce lets a burst of events (one Kubernetes update is several) settle
// before the directory is read again.
const overlayDebounce = 50 * time.Millisecond

// overlayFile is the content of one key file.
type overlayFile struct {
	path string // dir/KEY, as the operator sees it
	raw  string // the content, when err is nil
	err  error  // the file could not be read
}

type overlayWatcher struct {
	dir     string
	watcher *fsnotify.Watcher
	apply   func(map[string]overlayFile)
	log     *slog.Logger
	done    chan struct{}
}

// startOverlay reads dir, hands its content to apply, and keeps doing so after
// every change until ctx is done.
func startOverlay(ctx context.Context, dir string, log *slog.Logger, apply func(map[string]overlayFile)) (*overlayWatcher, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("settings overlay directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("settings overlay directory %s: not a directory", dir)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch settings overlay directory %s: %w", dir, err)
	}
	if err := w.Add(dir); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("watch settings overlay directory %s: %w", dir, err)
	}
	ow := &overlayWatcher{dir: dir, watcher: w, apply: apply, log: log, done: make(chan struct{})}
	// Read after the watch is in place, so no change falls between the two.
	if err := ow.reload(); err != nil {
		_ = w.Close()
		return nil, err
	}
	go ow.run(ctx)
	return ow, nil
}

func (ow *overlayWatcher) wait() { <-ow.done }

func (ow *overlayWatcher) run(ctx context.Context) {
	defer close(ow.done)
	defer ow.watcher.Close()
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ow.watcher.Events:
			if !ok {
				return
			}
			settle = time.After(overlayDebounce)
		case err, ok := <-ow.watcher.Errors:
			if !ok {
				return
			}
			ow.log.Error("watching the settings overlay directory", "dir", ow.dir, "error", err)
			settle = time.After(overlayDebounce)
		case <-settle:
			settle = nil
			if err := ow.reload(); err != nil {
				ow.log.Error("reading the settings overlay directory; keeping its last content", "error", err)
			}
		}
	}
}

func (ow *overlayWatcher) reload() error {
	files, err := readOverlay(ow.dir)
	if err != nil {
		return err
	}
	ow.apply(files)
	return nil
}

// readOverlay returns the key files of dir by name. Hidden names (..data, the
// timestamped directories) and directories are skipped; symlinks are followed.
func readOverlay(dir string) (map[string]overlayFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read settings overlay directory: %w", err)
	}
	files := make(map[string]overlayFile)
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(dir, name)
		st, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a dangling key symlink in the middle of an update
		}
		if err == nil && st.IsDir() {
			continue
		}
		f := overlayFile{path: path, err: err}
		if err == nil {
			var b []byte
			b, f.err = os.ReadFile(path)
			f.raw = string(b)
		}
		files[name] = f
	}
	return files, nil
}

// applyOverlay takes the full content of the overlay directory into the live view.
func (s *Settings) applyOverlay(files map[string]overlayFile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	defer s.problemsMayHaveChangedLocked()
	before, paths := s.snap.Load(), make(map[string]string, len(s.managed))
	for name, mk := range s.managed {
		paths[name] = mk.path
	}
	defer s.observeOverlayLocked(before, paths)
	for name, f := range files {
		if _, err := Lookup(name); err != nil {
			s.unknownOverlayFileLocked(name, f, err)
			continue
		}
		s.applyOverlayFileLocked(name, f)
	}
	for name := range s.managed {
		if _, ok := files[name]; !ok {
			delete(s.managed, name)
			s.publishLocked(name)
		}
	}
	for name := range s.unknownFiles {
		if _, ok := files[name]; !ok {
			delete(s.unknownFiles, name) // reported again if it comes back
		}
	}
}

// unknownOverlayFileLocked refuses a file that names no setting. It blocks acting
// while present: whatever it was meant to change is not in force.
func (s *Settings) unknownOverlayFileLocked(name string, f overlayFile, err error) {
	raw := overlayContent(f)
	if old, ok := s.unknownFiles[name]; ok && old.raw == raw {
		return
	}
	s.unknownFiles[name] = &refusal{
		path: f.path, raw: raw, value: f.raw, err: err,
		message: fmt.Sprintf("overlay file %s names no setting: %v", f.path, err),
	}
	s.metrics.overlayRejected.WithLabelValues("unknown").Inc()
	s.log.Error("settings overlay file names no setting; ignored, and Vigil does not act while it is there",
		"path", f.path, "error", err)
}

// overlayContent identifies the content of a file for "reported already": the
// text, or the read error of an unreadable file.
func overlayContent(f overlayFile) string {
	if f.err != nil {
		return "\x00unreadable: " + f.err.Error()
	}
	return f.raw
}

func (s *Settings) applyOverlayFileLocked(name string, f overlayFile) {
	mk, ok := s.managed[name]
	if !ok {
		mk = &managedKey{path: f.path}
		s.managed[name] = mk
	}
	mk.path = f.path
	var (
		parsed any
		err    = f.err
	)
	if err == nil {
		parsed, err = byName[name].Parse(f.raw)
	} else {
		err = fmt.Errorf("read %s: %w", f.path, err)
	}
	if err != nil {
		raw := overlayContent(f)
		if mk.refused == nil || mk.refused.raw != raw {
			mk.refused = &refusal{path: f.path, raw: raw, value: f.raw, err: err,
				message: fmt.Sprintf("overlay file %s refused: %v", f.path, err)}
			s.metrics.overlayRejected.WithLabelValues(name).Inc()
			if mk.good != nil {
				s.log.Error("settings overlay value refused; the last good value stays in force",
					"setting", name, "path", f.path, "in_force", mk.good.text, "error", err)
			} else {
				s.log.Error("settings overlay value refused, and this process never saw a good one: "+
					"the value in force is not the one given, and ActBlocked reports it until the file is fixed",
					"setting", name, "path", f.path, "error", err)
			}
		}
		s.publishLocked(name) // the key may have just become managed
		return
	}
	mk.refused = nil
	mk.good = &value{text: Format(parsed), parsed: parsed}
	s.publishLocked(name)
}
