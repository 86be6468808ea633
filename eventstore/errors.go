package eventstore

import (
	"errors"
	"fmt"
)

// Sentinel errors. Backends return them wrapped, or as the typed errors below that
// carry the details; match them with errors.Is.
var (
	// ErrNotFound: the stream is unknown.
	ErrNotFound = errors.New("eventstore: not found")
	// ErrConflict: Append met a sequence number that already exists. Nothing of the
	// call was written.
	ErrConflict = errors.New("eventstore: sequence number conflict")
	// ErrInvalid: the input breaks the contract (empty stream, partition < 1, ...).
	ErrInvalid = errors.New("eventstore: invalid input")
	// ErrTooLarge: an event, value or name exceeds its limit (MaxEventSize, ...).
	ErrTooLarge = errors.New("eventstore: too large")
	// ErrCorrupt: a stored event failed its integrity check and cannot be decoded.
	ErrCorrupt = errors.New("eventstore: corrupt event")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("eventstore: store closed")
	// ErrRunning: Delete without Force met a running stream.
	ErrRunning = errors.New("eventstore: stream is running")
	// ErrNotRoot: Delete without AllowNonRoot met a stream whose parent is not deleted
	// with it.
	ErrNotRoot = errors.New("eventstore: stream has a parent")
)

// ConflictError names the sequence number Append found already stored. It matches
// ErrConflict.
type ConflictError struct {
	Stream    string // the stream appended to
	Partition int64  // the partition appended to
	Seq       int64  // the sequence number already stored there
}

// Error says which sequence number of which stream and partition exists.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("eventstore: append stream %q partition %d: sequence number %d already exists",
		e.Stream, e.Partition, e.Seq)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// CorruptError names a stored event that cannot be decoded. It matches ErrCorrupt.
type CorruptError struct {
	Op        string // the reading operation, e.g. "read"
	Stream    string // the stream of the damaged event
	Partition int64  // its partition
	Seq       int64  // its sequence number
	Reason    string // e.g. "checksum mismatch"
}

// Error names the operation, the event and why it cannot be decoded.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("eventstore: %s stream %q partition %d: event %d is corrupt: %s",
		e.Op, e.Stream, e.Partition, e.Seq, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// NotFoundError names the unknown stream. It matches ErrNotFound.
type NotFoundError struct {
	Op     string // the operation, e.g. "stats"
	Stream string // the unknown stream
}

// Error names the operation and the unknown stream.
func (e *NotFoundError) Error() string {
	return fmt.Sprintf("eventstore: %s stream %q: not found", e.Op, e.Stream)
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// InvalidError describes rejected input. It matches ErrInvalid, or ErrTooLarge when a
// size limit was exceeded.
type InvalidError struct {
	Op     string // the operation, e.g. "append"
	Stream string // may be empty
	Field  string // the offending field, e.g. "event 2: Seq"
	Reason string // what is wrong with it, e.g. "a stream cannot be its own parent"
	// TooLarge marks a size limit violation (matches ErrTooLarge instead of ErrInvalid).
	TooLarge bool
}

// Error names the operation, the stream (when there is one), the field and the
// reason.
func (e *InvalidError) Error() string {
	if e.Stream == "" {
		return fmt.Sprintf("eventstore: %s: %s: %s", e.Op, e.Field, e.Reason)
	}
	return fmt.Sprintf("eventstore: %s stream %q: %s: %s", e.Op, e.Stream, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) (or ErrTooLarge) true.
func (e *InvalidError) Is(target error) bool {
	if e.TooLarge {
		return target == ErrTooLarge
	}
	return target == ErrInvalid
}

// RefusedError explains why Delete refused a stream. It matches its Kind, ErrRunning
// or ErrNotRoot.
type RefusedError struct {
	Op     string // the operation, e.g. "delete"
	Stream string // the stream refused (listed, or a descendant of a listed one)
	Kind   error  // ErrRunning or ErrNotRoot
	Reason string // for humans, with what to do instead
}

// Error names the operation, the stream and the reason.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("eventstore: %s stream %q: %s", e.Op, e.Stream, e.Reason)
}

// Is makes errors.Is(err, e.Kind) true.
func (e *RefusedError) Is(target error) bool { return target == e.Kind }

// Closed returns the error of op on a closed store; it matches ErrClosed.
func Closed(op string) error {
	return fmt.Errorf("eventstore: %s: %w", op, ErrClosed)
}

// NotFound returns the error of op on the unknown stream; it matches ErrNotFound.
func NotFound(op, stream string) error { return &NotFoundError{Op: op, Stream: stream} }

// IsContractError reports whether err is one of this package's errors (as opposed to
// a storage failure), which backends return unwrapped.
func IsContractError(err error) bool {
	for _, s := range []error{ErrNotFound, ErrConflict, ErrInvalid, ErrTooLarge, ErrCorrupt, ErrClosed, ErrRunning, ErrNotRoot} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
