package enginenode

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
)

// Sentinel errors at the package's edge; toStatus maps them to gRPC codes.
var (
	// ErrEmptyBootID: the boot id source was empty.
	ErrEmptyBootID = errors.New("empty boot id")
	// ErrNotStaged: publish of a volume that is not staged here.
	ErrNotStaged = errors.New("volume is not staged on this node")
	// ErrStagedElsewhere: stage of a volume already staged at another path or
	// with another access type.
	ErrStagedElsewhere = errors.New("volume is already staged differently")
	// ErrPublishedDifferently: publish of a target already published otherwise.
	ErrPublishedDifferently = errors.New("target path is already published differently")
	// ErrStaleEpoch: a stage carried an epoch older than the one in force here.
	ErrStaleEpoch = errors.New("epoch is older than the one staged")
	// ErrStillPublished: unstage while target paths are still published.
	ErrStillPublished = errors.New("volume is still published")
	// ErrBusy: another operation on the same volume is in progress.
	ErrBusy = errors.New("an operation on this volume is in progress")
	// ErrWrongFilesystem: the volume holds a filesystem of another type.
	ErrWrongFilesystem = errors.New("volume holds another filesystem")
	// ErrGated: staging is refused until cleanup after a fence is done.
	ErrGated = errors.New("staging refused: this node is fenced for the volume")
)

// toStatus maps an error to a gRPC status error: the one place that decides codes.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, ErrNotStaged), errors.Is(err, ErrStillPublished), errors.Is(err, ErrStaleEpoch),
		errors.Is(err, ErrWrongFilesystem), errors.Is(err, ErrGated):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrStagedElsewhere), errors.Is(err, ErrPublishedDifferently):
		code = codes.AlreadyExists
	case errors.Is(err, ErrBusy):
		code = codes.Aborted
	case errors.Is(err, datapath.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}

// invalid is an InvalidArgument status with a message naming the field.
func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}
