package schedule

import (
	"errors"
	"fmt"
	"strings"

	"github.com/duroq/duroq/mq"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrInvalid: a schedule or an option breaks the rules (see InvalidError).
	ErrInvalid = errors.New("schedule: invalid input")
	// ErrExists: Create was given the id of a schedule that exists.
	ErrExists = errors.New("schedule: a schedule with this id exists")
	// ErrNotFound: no schedule has this id.
	ErrNotFound = errors.New("schedule: no schedule with this id")
	// ErrUnreadable: a stored schedule cannot be decoded (damaged, or written by a
	// newer version of this package). Delete removes it.
	ErrUnreadable = errors.New("schedule: stored schedule cannot be read")
)

// InvalidError describes rejected input. It matches ErrInvalid.
type InvalidError struct {
	Op     string // the operation, e.g. "create"
	ID     string // the schedule's id ("" when the error is not about one)
	Field  string // the offending field, e.g. "Cron"
	Reason string // what is wrong with it
}

// Error names the operation, the schedule (clipped), the field and the reason.
func (e *InvalidError) Error() string {
	if e.ID == "" {
		return fmt.Sprintf("schedule: %s: %s: %s", e.Op, e.Field, e.Reason)
	}
	return fmt.Sprintf("schedule: %s %q: %s: %s", e.Op, mq.Clip(e.ID), e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(op, id, field, reason string) error {
	return &InvalidError{Op: op, ID: id, Field: field, Reason: reason}
}

// idError is the sentinel kind for the schedule id in op.
func idError(op, id string, kind error) error { return &opError{op: op, id: id, kind: kind} }

// opError is a sentinel error of an operation on a schedule, with details.
type opError struct {
	op, id string
	kind   error
	detail string
}

func (e *opError) Error() string {
	msg := fmt.Sprintf("schedule: %s %q: %s", e.op, mq.Clip(e.id), strings.TrimPrefix(e.kind.Error(), "schedule: "))
	if e.detail != "" {
		msg += ": " + e.detail
	}
	return msg
}

func (e *opError) Is(target error) bool { return target == e.kind }
