package client

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
)

func TestRetryable_NeverRetriesFencedOrTimedOutWrites(t *testing.T) {
	ctx := context.Background()
	fenced := datapath.ToStatus(datapath.ErrFenced)
	cases := []struct {
		err   error
		class retryClass
		want  bool
	}{
		{status.Error(codes.Unavailable, "connection refused"), retryTransport, true},
		{status.Error(codes.Unavailable, "connection refused"), retrySafe, true},
		{status.Error(codes.DeadlineExceeded, "attempt timed out"), retrySafe, true},
		{status.Error(codes.DeadlineExceeded, "attempt timed out"), retryTransport, false},
		{fenced, retryTransport, false},
		{fenced, retrySafe, false},
		{datapath.ToStatus(datapath.ErrNotFound), retrySafe, false},
		{errors.New("plain"), retrySafe, false},
	}
	for _, c := range cases {
		if got := retryable(ctx, c.err, c.class); got != c.want {
			t.Errorf("retryable(%v, class %d) = %v, want %v", c.err, c.class, got, c.want)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if retryable(done, status.Error(codes.Unavailable, "x"), retrySafe) {
		t.Error("retried after the caller's context ended")
	}
}
