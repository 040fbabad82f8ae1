package csi

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
)

// codeForSentinel lists the datapath sentinel errors and the gRPC code each one
// becomes at the CSI boundary. Order matters only if an error wraps two of them;
// the first match wins.
var codeForSentinel = []struct {
	err  error
	code codes.Code
}{
	{datapath.ErrInvalidArgument, codes.InvalidArgument},
	{datapath.ErrNotFound, codes.NotFound},
	{datapath.ErrAlreadyExists, codes.AlreadyExists},
	// Published to another node: CSI's code for "volume published to another
	// node" and "node fenced until it cleans up" alike; the attacher retries.
	{datapath.ErrAttachedElsewhere, codes.FailedPrecondition},
	{datapath.ErrFenced, codes.FailedPrecondition},
	// Deleting a volume that still has a live grant: CSI's "volume in use".
	{datapath.ErrInUse, codes.FailedPrecondition},
	{datapath.ErrOutOfRange, codes.OutOfRange},
	{datapath.ErrNoSpace, codes.ResourceExhausted},
	{datapath.ErrUnauthenticated, codes.Unauthenticated},
	// A flush of the volume's data failed: writes may be lost, and its I/O
	// is refused until an operator clears the failure.
	{datapath.ErrVolumeFailed, codes.DataLoss},
	// Committed, but the server that holds the volume's data has not
	// confirmed it applied it: not done yet; the sidecars call again.
	{datapath.ErrNotApplied, codes.Unavailable},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
}

// statusFromError is the one place where errors become gRPC statuses. what says
// which operation failed ("create volume \"pvc-1\""); it prefixes the message so
// the sidecar's events name the volume. A status error keeps its code; an error
// that is neither a sentinel nor a status is Internal.
func statusFromError(err error, what string) error {
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf("%s: %v", what, err)
	for _, m := range codeForSentinel {
		if errors.Is(err, m.err) {
			return status.Error(m.code, msg)
		}
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return status.Error(st.Code(), msg)
	}
	return status.Error(codes.Internal, msg)
}

// invalidArgument is the error for a request field that fails a check: it names
// the field, the value, and what is allowed.
func invalidArgument(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// outOfRange is the error for a capacity no volume size can satisfy.
func outOfRange(format string, args ...any) error {
	return status.Errorf(codes.OutOfRange, format, args...)
}
