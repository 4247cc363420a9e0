package comm

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by a Communicator wrap one of these (test
// with errors.Is) and say what failed and where.
var (
	// ErrInvalidArgument reports a call whose arguments are wrong: bad
	// buffer sizes, dtype, reduction, rank or counts. The communicator is
	// not affected.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrClosed reports a call on a communicator that was closed.
	ErrClosed = errors.New("communicator closed")
	// ErrAborted reports that the communicator was aborted, by this rank or
	// another one.
	ErrAborted = errors.New("communicator aborted")
	// ErrPeerFailed reports that a rank died, hung or lost its connection.
	ErrPeerFailed = errors.New("peer failed")
	// ErrMismatch reports collectives that do not match across ranks
	// (different op, count, dtype, reduction or root at the same sequence
	// number), or point-to-point messages whose sizes or types disagree.
	ErrMismatch = errors.New("mismatched operations")
	// ErrTimeout reports an operation that did not finish before its
	// deadline. It also matches context.DeadlineExceeded.
	ErrTimeout = errors.New("timed out")
	// ErrExcluded reports that Shrink made no communicator for this rank:
	// the survivors excluded it, it found no quorum, or it could not
	// finish the agreement before its deadline.
	ErrExcluded = errors.New("excluded from the shrunk communicator")
)

// OpError is returned by a failed operation. It names the rank that saw the
// failure, the operation and its sequence number, and wraps the cause.
type OpError struct {
	Rank int    // rank that returned the error
	Op   string // operation, e.g. "AllReduce"
	Seq  uint64 // collective sequence number (0 for point-to-point)
	Err  error  // cause
}

func (e *OpError) Error() string {
	if e.Seq == 0 {
		return fmt.Sprintf("occl: rank %d: %s: %v", e.Rank, e.Op, e.Err)
	}
	return fmt.Sprintf("occl: rank %d: %s (seq %d): %v", e.Rank, e.Op, e.Seq, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

// PeerError says which rank failed and why. Every surviving rank of a
// communicator reports the same PeerError for the same failure.
type PeerError struct {
	Peer     int    // the rank that failed, or -1 if no single rank is to blame
	Reporter int    // the rank that detected the failure
	Kind     error  // ErrPeerFailed, ErrAborted, ErrMismatch or ErrTimeout
	Reason   string // what was observed
}

func (e *PeerError) Error() string {
	switch {
	case e.Peer >= 0 && e.Reporter >= 0 && e.Reporter != e.Peer:
		return fmt.Sprintf("%v: rank %d: %s (detected by rank %d)", e.Kind, e.Peer, e.Reason, e.Reporter)
	case e.Peer >= 0:
		return fmt.Sprintf("%v: rank %d: %s", e.Kind, e.Peer, e.Reason)
	case e.Reporter >= 0:
		return fmt.Sprintf("%v: %s (detected by rank %d)", e.Kind, e.Reason, e.Reporter)
	}
	return fmt.Sprintf("%v: %s", e.Kind, e.Reason)
}

func (e *PeerError) Unwrap() error { return e.Kind }

// Is makes a timeout also match context.DeadlineExceeded.
func (e *PeerError) Is(target error) bool {
	return target == e.Kind || (e.Kind == ErrTimeout && target == context.DeadlineExceeded)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}
