package provider

import (
	"errors"
	"fmt"
)

// Sentinel errors of the provider contract, matched with errors.Is.
var (
	// ErrLockLost: the lock token is unknown, lapsed, or its item was taken away.
	ErrLockLost = errors.New("runtime: lock lost")
	// ErrNotFound: the instance (or execution) does not exist.
	ErrNotFound = errors.New("runtime: not found")
	// ErrDuplicateEvent: an event id already exists in the execution.
	ErrDuplicateEvent = errors.New("runtime: duplicate event id")
	// ErrInvalid: the input breaks the contract.
	ErrInvalid = errors.New("runtime: invalid input")
	// ErrCorruptHistory: stored history cannot be decoded.
	ErrCorruptHistory = errors.New("runtime: corrupt history")
	// ErrClosed: the provider was closed.
	ErrClosed = errors.New("runtime: provider closed")
	// ErrInstanceExists: a start refused by its StartPolicy, the instance existing
	// (or its start pending).
	ErrInstanceExists = errors.New("runtime: instance exists")
)

// ProviderError is a provider failure classified for the runtime: a retryable error
// (contention, a transient storage failure) may succeed if the operation is tried
// again; a permanent one (a lost lock, a duplicate event, bad input) will not.
type ProviderError struct {
	Op        string // the provider operation, e.g. "ack_orchestration_item"
	Retryable bool   // whether trying the operation again may succeed
	Err       error  // the failure, often wrapping one of the sentinel errors above
}

// Error names the operation, whether the failure is retryable, and the failure.
func (e *ProviderError) Error() string {
	kind := "permanent"
	if e.Retryable {
		kind = "retryable"
	}
	return fmt.Sprintf("provider %s (%s): %v", e.Op, kind, e.Err)
}

// Unwrap returns Err, so errors.Is sees the sentinel errors it wraps.
func (e *ProviderError) Unwrap() error { return e.Err }

// Permanent wraps err from op as a permanent provider error.
func Permanent(op string, err error) error { return &ProviderError{Op: op, Err: err} }

// Retryable wraps err from op as a retryable provider error.
func Retryable(op string, err error) error { return &ProviderError{Op: op, Retryable: true, Err: err} }

// IsRetryable reports whether err is a provider error marked retryable.
func IsRetryable(err error) bool {
	var pe *ProviderError
	return errors.As(err, &pe) && pe.Retryable
}
