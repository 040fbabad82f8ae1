package ledger

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ErrBadConfig: a writer Config field is missing or out of range.
var ErrBadConfig = errors.New("bad writer config")

// Config is what Run needs.
type Config struct {
	// Dir is the root of the pod's volume (its target path on the node).
	Dir string
	// PodUID and Node name the writer in its records.
	PodUID, Node string
	// Ledger is the ledger file on the host; created if missing, appended to.
	Ledger string
	// Interval is the time between two records; default 100ms.
	Interval time.Duration
	// RetryAfter is the pause after a failed write, fsync or open; default 500ms.
	RetryAfter time.Duration
	// RequireMount: open the records file only while Dir is a mount point (its
	// device differs from its parent's). A container keeps its volume mounted in
	// a mount namespace of its own, so it never writes into the bare target
	// directory of the node; a writer that runs in the host's namespace must
	// refuse to, or a write the volume never sees would be acknowledged.
	RequireMount bool
	// Logf receives one line per failure and per recovery; default none.
	Logf func(format string, args ...any)
}

func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" || c.Ledger == "" || !validName(c.PodUID) || !validName(c.Node) {
		return c, fmt.Errorf("%w: Dir %q, Ledger %q, PodUID %q, Node %q: all required, names without spaces",
			ErrBadConfig, c.Dir, c.Ledger, c.PodUID, c.Node)
	}
	if c.Interval == 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = 500 * time.Millisecond
	}
	if c.Interval < 0 || c.RetryAfter < 0 {
		return c, fmt.Errorf("%w: Interval %s, RetryAfter %s: want 0 (default) or more", ErrBadConfig, c.Interval, c.RetryAfter)
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c, nil
}

// Run appends a record to Dir/RecordsFile(PodUID) every Interval, fsyncs it
// and only then appends its acknowledgement to the ledger, until ctx ends. The
// sequence continues after the last acknowledged one of an existing ledger. A
// failed write, fsync or open is not acknowledged: the file is closed and
// opened again after RetryAfter, and the next record takes the next number.
// Only a bad Config or a ledger it cannot write is an error.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	acks, err := ReadLedger(cfg.Ledger)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("ledger %s: %w", cfg.Ledger, err)
	}
	seq := uint64(1)
	if len(acks) > 0 {
		seq = acks[len(acks)-1].Seq + 1
	}
	led, err := os.OpenFile(cfg.Ledger, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer led.Close()
	w := &writer{cfg: cfg, path: filepath.Join(cfg.Dir, RecordsFile(cfg.PodUID)), ledger: led}
	defer w.close()
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	for ; ; seq++ {
		if err := w.once(seq); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// writer holds the open records file between records.
type writer struct {
	cfg     Config
	path    string
	f       *os.File
	ledger  *os.File
	failing bool
	retry   time.Time
}

func (w *writer) close() {
	if w.f != nil {
		_ = w.f.Close()
		w.f = nil
	}
}

// once writes record seq and acknowledges it if fsync succeeded; an I/O error
// on the volume is logged and retried later, an error on the ledger returned.
func (w *writer) once(seq uint64) error {
	if w.f == nil {
		if time.Now().Before(w.retry) {
			return nil
		}
		if w.cfg.RequireMount {
			if err := isMountPoint(w.cfg.Dir); err != nil {
				w.fail(seq, "open", err)
				return nil
			}
		}
		f, err := os.OpenFile(w.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			w.fail(seq, "open", err)
			return nil
		}
		w.f = f
	}
	rec := Record{PodUID: w.cfg.PodUID, Node: w.cfg.Node, Seq: seq, Time: time.Now()}
	if _, err := w.f.Write(rec.Line()); err != nil {
		w.fail(seq, "write", err)
		return nil
	}
	if err := w.f.Sync(); err != nil {
		w.fail(seq, "fsync", err)
		return nil
	}
	if _, err := w.ledger.Write(Ack{Seq: seq, Time: rec.Time}.Line()); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if w.failing {
		w.cfg.Logf("writer %s: record %d acknowledged again", w.cfg.PodUID, seq)
		w.failing = false
	}
	return nil
}

// fail closes the file and schedules the next open; it logs the first failure
// of a run of failures.
func (w *writer) fail(seq uint64, op string, err error) {
	if !w.failing {
		w.cfg.Logf("writer %s: record %d: %s %s: %v (not acknowledged; reopening every %s)", w.cfg.PodUID, seq, op, w.path, err, w.cfg.RetryAfter)
	}
	w.failing = true
	w.close()
	w.retry = time.Now().Add(w.cfg.RetryAfter)
}

// ErrNotMounted: RequireMount is set and the volume's directory is not a mount point.
var ErrNotMounted = errors.New("volume not mounted")

// isMountPoint reports, as an error, that dir is not a mount point: its device
// is its parent's.
func isMountPoint(dir string) error {
	var st, parent syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return err
	}
	if err := syscall.Stat(filepath.Dir(filepath.Clean(dir)), &parent); err != nil {
		return err
	}
	if st.Dev == parent.Dev {
		return fmt.Errorf("%w: %s is on its parent's file system", ErrNotMounted, dir)
	}
	return nil
}
