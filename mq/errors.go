package mq

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Sentinel errors. Backends wrap them with the operation and its subject; match them
// with errors.Is.
var (
	// ErrLockLost: the lock token is unknown, its lock lapsed, or its batch was taken
	// away (re-fetched after expiry, or a message removed). Nothing was changed.
	ErrLockLost = errors.New("mq: lock lost")
	// ErrClosed: the queue was closed.
	ErrClosed = errors.New("mq: queue closed")
	// ErrInvalid: the input breaks the contract (empty queue name, negative delay, ...).
	ErrInvalid = errors.New("mq: invalid input")
	// ErrPayloadTooLarge: a payload exceeds MaxPayloadSize.
	ErrPayloadTooLarge = errors.New("mq: payload too large")
	// ErrDuplicateKey: a message key is already pending in its queue.
	ErrDuplicateKey = errors.New("mq: duplicate message key")
	// ErrCorrupt: the storage is damaged (for example a corrupted database page).
	// Retrying cannot help; the error is permanent.
	ErrCorrupt = errors.New("mq: storage corrupt")
)

// InvalidError describes rejected input. It matches ErrInvalid (or
// ErrPayloadTooLarge for oversized payloads) with errors.Is.
type InvalidError struct {
	Op     string // the operation, e.g. "enqueue"
	Field  string // the offending field, e.g. "message 2: Queue"
	Reason string // what is wrong with it
	kind   error
}

// Error names the operation, the field and the reason.
func (e *InvalidError) Error() string {
	return fmt.Sprintf("mq: %s: %s: %s", e.Op, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) (or ErrPayloadTooLarge) true.
func (e *InvalidError) Is(target error) bool {
	if e.kind != nil {
		return target == e.kind
	}
	return target == ErrInvalid
}

func invalid(op, field, reason string) error {
	return &InvalidError{Op: op, Field: field, Reason: reason}
}

// DuplicateKeyError names the message key that is already pending. It matches
// ErrDuplicateKey with errors.Is.
type DuplicateKeyError struct {
	Op, Queue, Key string // the operation (e.g. "enqueue"), the queue and the message key
}

// Error names the operation, the key and the queue (both clipped to about 200 bytes).
func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("mq: %s: message key %q is already pending in queue %q", e.Op, Clip(e.Key), Clip(e.Queue))
}

// Is makes errors.Is(err, ErrDuplicateKey) true.
func (e *DuplicateKeyError) Is(target error) bool { return target == ErrDuplicateKey }

// LockLostError reports a lock token that is not held. It matches ErrLockLost.
type LockLostError struct {
	Op, Token string // the operation (e.g. "ack") and the lock token it was given
}

// Error names the operation and the token (clipped to about 200 bytes).
func (e *LockLostError) Error() string {
	return fmt.Sprintf("mq: %s: lock token %q is not held (unknown, lapsed, or its batch was taken away)", e.Op, Clip(e.Token))
}

// Is makes errors.Is(err, ErrLockLost) true.
func (e *LockLostError) Is(target error) bool { return target == ErrLockLost }

// LockLost returns the error of op on a token that is not held.
func LockLost(op, token string) error { return &LockLostError{Op: op, Token: token} }

// Closed returns the error of op on a closed queue; it matches ErrClosed.
func Closed(op string) error {
	return &kindError{msg: fmt.Sprintf("mq: %s: the queue is closed", op), kind: ErrClosed}
}

// kindError is an error with its own text that matches one sentinel.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }

// SettleError reports the settlements of one Settle call whose lock was lost; the
// others were applied. It matches ErrLockLost.
type SettleError struct {
	// Lost maps the index of each lost settlement (in the call's order) to its error.
	Lost map[int]error
}

// Error counts the lost settlements and gives the error of the first one.
func (e *SettleError) Error() string {
	if len(e.Lost) == 0 {
		return "mq: settle: no settlement lost its lock"
	}
	first := -1
	for i := range e.Lost {
		if first < 0 || i < first {
			first = i
		}
	}
	return fmt.Sprintf("mq: settle: %d of the settlements lost their lock (the others were applied); settlement %d: %v",
		len(e.Lost), first, e.Lost[first])
}

// Is makes errors.Is(err, ErrLockLost) true.
func (e *SettleError) Is(target error) bool { return target == ErrLockLost }

// Corrupt returns the error of op on damaged storage; it matches ErrCorrupt and
// wraps cause.
func Corrupt(op string, cause error) error {
	return fmt.Errorf("mq: %s: %w: %w", op, ErrCorrupt, cause)
}

// clipSize bounds the user-supplied strings an error message repeats.
const clipSize = 200

// Clip shortens s for an error message: at most about 200 bytes (cut at a UTF-8
// boundary), saying how long it was, so that an error never echoes megabytes.
func Clip(s string) string {
	if len(s) <= clipSize {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", TruncateUTF8(s, clipSize), len(s))
}

// TruncateUTF8 returns the longest prefix of s of at most n bytes that does not end
// inside a UTF-8 sequence.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
