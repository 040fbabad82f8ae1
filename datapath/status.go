package datapath

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the ErrorInfo domain of datapath errors on the wire.
const ErrorDomain = "datapath.vigil.io"

// wireErrors is the one table that maps sentinels to gRPC codes and to the
// ErrorInfo reason that identifies them exactly on the wire.
var wireErrors = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{ErrNotFound, codes.NotFound, "NOT_FOUND"},
	{ErrAlreadyExists, codes.AlreadyExists, "ALREADY_EXISTS"},
	{ErrFenced, codes.PermissionDenied, "FENCED"},
	{ErrAttachedElsewhere, codes.FailedPrecondition, "ATTACHED_ELSEWHERE"},
	{ErrInUse, codes.FailedPrecondition, "IN_USE"},
	{ErrOutOfRange, codes.OutOfRange, "OUT_OF_RANGE"},
	{ErrInvalidArgument, codes.InvalidArgument, "INVALID_ARGUMENT"},
	{ErrUnauthenticated, codes.Unauthenticated, "UNAUTHENTICATED"},
	{ErrNoSpace, codes.ResourceExhausted, "NO_SPACE"},
	// Appended, not inserted: a bulk response code is an index into this table.
	{ErrPermissionDenied, codes.PermissionDenied, "PERMISSION_DENIED"},
	{ErrAuthUnavailable, codes.Unavailable, "AUTH_UNAVAILABLE"},
	{ErrReadOnly, codes.PermissionDenied, "READ_ONLY"},
	{ErrStaleSession, codes.Aborted, "STALE_SESSION"},
	{ErrVolumeFailed, codes.DataLoss, "VOLUME_FAILED"},
	{ErrNotLeader, codes.Unavailable, "NOT_LEADER"},
	{ErrNotCommitted, codes.Unavailable, "NOT_COMMITTED"},
	{ErrHeldElsewhere, codes.FailedPrecondition, "HELD_ELSEWHERE"},
	{ErrNotHolder, codes.FailedPrecondition, "NOT_HOLDER"},
	{ErrNotApplied, codes.Unavailable, "NOT_APPLIED"},
	{ErrStaleMemberEpoch, codes.Aborted, "STALE_MEMBER_EPOCH"},
	{ErrReplicaQuorum, codes.FailedPrecondition, "REPLICA_QUORUM"},
	{ErrReplicaNotInSync, codes.Unavailable, "REPLICA_NOT_IN_SYNC"},
}

// ToStatus turns an error into a gRPC status error that carries the sentinel's
// reason, so that FromStatus on the other side restores errors.Is. Errors that
// match no sentinel become Internal (or Canceled / DeadlineExceeded).
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isSentinel(err) {
		return err
	}
	for _, w := range wireErrors {
		if errors.Is(err, w.err) {
			st := status.New(w.code, err.Error())
			info := &errdetails.ErrorInfo{Reason: w.reason, Domain: ErrorDomain}
			if nl := (*NotLeaderError)(nil); errors.As(err, &nl) && nl.LeaderAddress != "" {
				info.Metadata = map[string]string{LeaderAddressKey: nl.LeaderAddress}
			}
			if nh := (*NotHolderError)(nil); errors.As(err, &nh) && nh.HolderAddress != "" {
				info.Metadata = map[string]string{HolderAddressKey: nh.HolderAddress}
			}
			if ns := (*ReplicaNotInSyncError)(nil); errors.As(err, &ns) && len(ns.InSyncAddresses) > 0 {
				info.Metadata = map[string]string{InSyncAddressesKey: strings.Join(ns.InSyncAddresses, ",")}
			}
			if d, derr := st.WithDetails(info); derr == nil {
				st = d
			}
			return st.Err()
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func isSentinel(err error) bool {
	for _, w := range wireErrors {
		if errors.Is(err, w.err) {
			return true
		}
	}
	return false
}

// RemoteError is an error the server returned: its message is the server's, and
// it unwraps to the matching sentinel (if any) and to the gRPC status.
type RemoteError struct {
	Code     codes.Code
	Message  string
	Sentinel error // nil when the server's error matches no sentinel
	// LeaderAddress: with ErrNotLeader, the leader's datapath address when
	// the server knew it.
	LeaderAddress string
	// HolderAddress: with ErrNotHolder, the datapath address of the server
	// that holds the volume's data, when the group recorded it.
	HolderAddress string
	// InSyncAddresses: with ErrReplicaNotInSync, the datapath addresses of
	// the volume's in-sync replicas that the group recorded.
	InSyncAddresses []string
}

func (e *RemoteError) Error() string { return e.Message }

// Unwrap returns the sentinel, if any.
func (e *RemoteError) Unwrap() error { return e.Sentinel }

// GRPCStatus lets status.FromError and status.Code see the original code.
func (e *RemoteError) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

// FromStatus turns a gRPC status error from the server back into an error that
// satisfies errors.Is against the datapath sentinels. Non-status errors are
// returned unchanged.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	re := &RemoteError{Code: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != ErrorDomain {
			continue
		}
		for _, w := range wireErrors {
			if w.reason == info.GetReason() {
				re.Sentinel = w.err
			}
		}
		re.LeaderAddress = info.GetMetadata()[LeaderAddressKey]
		re.HolderAddress = info.GetMetadata()[HolderAddressKey]
		if a := info.GetMetadata()[InSyncAddressesKey]; a != "" {
			re.InSyncAddresses = strings.Split(a, ",")
		}
	}
	if re.Sentinel == nil && st.Code() == codes.Unauthenticated {
		// Rejected by the auth interceptor or by gRPC itself.
		re.Sentinel = ErrUnauthenticated
	}
	return re
}
