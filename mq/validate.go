package mq

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The helpers below hold the input rules of the contract in one place; every backend
// calls them before touching its storage, so all backends reject the same input with
// the same errors.

// CheckMessages validates msgs for op (ErrInvalid, ErrPayloadTooLarge,
// ErrDuplicateKey for a message key repeated within msgs).
func CheckMessages(op string, msgs []Message) error {
	type qk struct{ queue, key string }
	var keys map[qk]bool
	for i, m := range msgs {
		field := func(name string) string { return fmt.Sprintf("message %d: %s", i, name) }
		if err := checkName(op, field("Queue"), m.Queue, true); err != nil {
			return err
		}
		for _, f := range []struct{ name, value string }{
			{"RoutingKey", m.RoutingKey}, {"Tag", m.Tag}, {"Session", m.Session}, {"Key", m.Key},
		} {
			if err := checkName(op, field(f.name), f.value, false); err != nil {
				return err
			}
		}
		if m.RoutingKey != "" && m.Session != "" {
			return invalid(op, field("Session"), "a message cannot carry both a routing key and a session")
		}
		if m.Delay < 0 {
			return invalid(op, field("Delay"), fmt.Sprintf("negative delay %v", m.Delay))
		}
		if len(m.Payload) > MaxPayloadSize {
			return &InvalidError{Op: op, Field: field("Payload"), kind: ErrPayloadTooLarge,
				Reason: fmt.Sprintf("%d bytes exceeds the limit of %d bytes", len(m.Payload), MaxPayloadSize)}
		}
		if m.Key != "" {
			k := qk{m.Queue, m.Key}
			if keys[k] {
				return &DuplicateKeyError{Op: op, Queue: m.Queue, Key: m.Key}
			}
			if keys == nil {
				keys = make(map[qk]bool)
			}
			keys[k] = true
		}
	}
	return nil
}

// CheckQueue validates a queue name for op.
func CheckQueue(op, queue string) error { return checkName(op, "queue", queue, true) }

// CheckToken validates a lock token for op: an empty token can never be held.
func CheckToken(op, token string) error {
	if token == "" {
		return LockLost(op, token)
	}
	return nil
}

// CheckDuration rejects a negative duration named field for op.
func CheckDuration(op, field string, d time.Duration) error {
	if d < 0 {
		return invalid(op, field, fmt.Sprintf("negative duration %v", d))
	}
	return nil
}

// NormalizeDequeue validates opts for DequeueBatch on queue and fills in defaults.
func NormalizeDequeue(queue string, opts DequeueOptions) (DequeueOptions, error) {
	const op = "dequeue"
	if err := CheckQueue(op, queue); err != nil {
		return opts, err
	}
	if err := CheckDuration(op, "LockTimeout", opts.LockTimeout); err != nil {
		return opts, err
	}
	if err := CheckDuration(op, "Wait", opts.Wait); err != nil {
		return opts, err
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.Tags.Mode > TagNone {
		return opts, invalid(op, "Tags", fmt.Sprintf("unknown tag mode %d", opts.Tags.Mode))
	}
	if s := opts.Session; s != nil {
		if err := checkName(op, "Session.Owner", s.Owner, true); err != nil {
			return opts, err
		}
		if err := CheckDuration(op, "Session.LeaseTimeout", s.LeaseTimeout); err != nil {
			return opts, err
		}
		cp := *s
		if cp.LeaseTimeout == 0 {
			cp.LeaseTimeout = DefaultSessionLease
		}
		opts.Session = &cp
	}
	return opts, nil
}

func checkName(op, field, v string, required bool) error {
	if v == "" && required {
		return invalid(op, field, "must not be empty")
	}
	if len(v) > MaxNameSize {
		return invalid(op, field, fmt.Sprintf("%d bytes exceeds the limit of %d bytes", len(v), MaxNameSize))
	}
	// Every backend must be able to store what one accepts (PostgreSQL text holds
	// neither invalid UTF-8 nor NUL).
	if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return invalid(op, field, "must be valid UTF-8 without NUL bytes")
	}
	return nil
}
