package enginenode

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vigil-storage/vigil/datapath"
)

// flakyDatapath fails the first fails calls of each kind with err, then
// answers.
type flakyDatapath struct {
	fails int32
	err   error
	calls atomic.Int32
}

func (f *flakyDatapath) answer() error {
	if f.calls.Add(1) <= f.fails {
		return f.err
	}
	return nil
}

func (f *flakyDatapath) ReadAt(context.Context, string, string, uint64, int64, int) ([]byte, error) {
	if err := f.answer(); err != nil {
		return nil, err
	}
	return []byte("data"), nil
}
func (f *flakyDatapath) WriteAt(context.Context, string, string, uint64, int64, []byte) error {
	return f.answer()
}
func (f *flakyDatapath) Flush(context.Context, string, string, uint64) error { return f.answer() }
func (f *flakyDatapath) GetVolume(context.Context, string) (datapath.Volume, error) {
	return datapath.Volume{}, nil
}

// The transport error a datapath restart gives: the client's retries are
// spent while the datapath is still down.
var errRestarting = fmt.Errorf("datapath write at 10.0.0.1:9600 (4 attempts): bulk transport: TLS handshake: EOF")

// A datapath that restarts for a moment does not fail the kernel's I/O: each
// request is sent again until it is answered, within --io-timeout.
func TestVolumeBackend_Retry_RidesThroughARestart(t *testing.T) {
	for _, op := range []string{"read", "write", "flush"} {
		t.Run(op, func(t *testing.T) {
			dp := &flakyDatapath{fails: 3, err: errRestarting}
			m := NewMetrics(nil)
			b := newVolumeBackend(dp, "vol-1", "node-a", 2, 30*time.Second, m)
			var err error
			switch op {
			case "read":
				_, err = b.ReadAt(context.Background(), 0, 4)
			case "write":
				err = b.WriteAt(context.Background(), 0, []byte("x"))
			case "flush":
				err = b.Flush(context.Background())
			}
			if err != nil {
				t.Fatalf("%s after 3 unanswered attempts: %v", op, err)
			}
			if n := dp.calls.Load(); n != 4 {
				t.Errorf("%d calls, want 4", n)
			}
			if got := testutil.ToFloat64(m.ioRetries); got != 3 {
				t.Errorf("io retries counted %v, want 3", got)
			}
		})
	}
}

// A write refused as stale (nothing written) and an attempt that timed out
// are sent again: neither is the datapath's word on the write.
func TestVolumeBackend_Retry_StaleSessionAndTimeoutAreSentAgain(t *testing.T) {
	for _, answer := range []error{&datapath.RemoteError{Sentinel: datapath.ErrStaleSession}, context.DeadlineExceeded} {
		dp := &flakyDatapath{fails: 2, err: answer}
		b := newVolumeBackend(dp, "vol-1", "node-a", 2, 30*time.Second, NewMetrics(nil))
		if err := b.WriteAt(context.Background(), 0, []byte("x")); err != nil {
			t.Errorf("%v: %v", answer, err)
		}
		if n := dp.calls.Load(); n != 3 {
			t.Errorf("%v: %d calls, want 3", answer, n)
		}
	}
}

// The datapath's own word ends the request at once: a fenced node's write is
// never sent again.
func TestVolumeBackend_Retry_DefinitiveAnswersAreNotRetried(t *testing.T) {
	for _, answer := range []error{datapath.ErrFenced, datapath.ErrNotFound, datapath.ErrOutOfRange,
		datapath.ErrUnauthenticated, datapath.ErrPermissionDenied, datapath.ErrVolumeFailed, &datapath.RemoteError{Sentinel: datapath.ErrFenced}} {
		dp := &flakyDatapath{fails: 100, err: answer}
		b := newVolumeBackend(dp, "vol-1", "node-a", 2, 30*time.Second, NewMetrics(nil))
		err := b.WriteAt(context.Background(), 0, []byte("x"))
		if !errors.Is(err, answer) && !errors.Is(err, datapath.ErrFenced) {
			t.Errorf("%v: err %v", answer, err)
		}
		if n := dp.calls.Load(); n != 1 {
			t.Errorf("%v: %d calls, want 1", answer, n)
		}
	}
}

// A datapath that stays away fails the request once --io-timeout is spent,
// with the last error.
func TestVolumeBackend_Retry_GivesUpAtTheIOTimeout(t *testing.T) {
	dp := &flakyDatapath{fails: 1 << 30, err: errRestarting}
	b := newVolumeBackend(dp, "vol-1", "node-a", 2, 400*time.Millisecond, NewMetrics(nil))
	start := time.Now()
	err := b.WriteAt(context.Background(), 0, []byte("x"))
	if err == nil || !errors.Is(err, errRestarting) {
		t.Fatalf("err %v, want the last transport error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("gave up after %s, want about the 400ms io timeout", d)
	}
	if n := dp.calls.Load(); n < 2 {
		t.Errorf("%d calls within the io timeout, want more than 1", n)
	}
}
