package mq

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/duroq/duroq/internal/tracectx"
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
		// Named only on failure: formatting every field of every message cost a
		// few percent of a PostgreSQL worker's CPU.
		field := func(name string) string { return fmt.Sprintf("message %d: %s", i, name) }
		for _, f := range []struct {
			name, value string
			required    bool
		}{
			{"Queue", m.Queue, true}, {"RoutingKey", m.RoutingKey, false}, {"Tag", m.Tag, false}, {"Session", m.Session, false},
			{"Key", m.Key, false}, {"LimitGroup", m.LimitGroup, false}, {"DedupID", m.DedupID, false},
		} {
			if reason := nameProblem(f.value, f.required); reason != "" {
				return invalid(op, field(f.name), reason)
			}
		}
		if m.RoutingKey != "" && m.Session != "" {
			return invalid(op, field("Session"), "a message cannot carry both a routing key and a session")
		}
		if m.Delay < 0 {
			return invalid(op, field("Delay"), fmt.Sprintf("negative delay %v", m.Delay))
		}
		switch {
		case m.DedupWindow < 0 || m.DedupWindow > MaxDedupWindow:
			return invalid(op, field("DedupWindow"), fmt.Sprintf("%v is outside [0, %v]", m.DedupWindow, MaxDedupWindow))
		case m.DedupWindow > 0 && m.DedupID == "":
			return invalid(op, field("DedupWindow"), "a window needs a DedupID to remember")
		}
		if m.TraceParent != "" && (len(m.TraceParent) > tracectx.MaxSize || !tracectx.Remote(m.TraceParent).IsValid()) {
			return invalid(op, field("TraceParent"), "not a W3C traceparent (version-traceid-spanid-flags in hex)")
		}
		if m.Priority < MinPriority || m.Priority > MaxPriority {
			return invalid(op, field("Priority"), fmt.Sprintf("%d is outside [%d, %d]", m.Priority, MinPriority, MaxPriority))
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

// Deduplicated returns msgs without the messages whose (Queue, DedupID) an earlier
// message of msgs has: the first of a DedupID wins. It returns msgs itself when no
// DedupID repeats.
func Deduplicated(msgs []Message) []Message {
	type qd struct{ queue, id string }
	var seen map[qd]bool
	return keep(msgs, func(m *Message) bool {
		if m.DedupID == "" {
			return true
		}
		k := qd{m.Queue, m.DedupID}
		if seen[k] {
			return false
		}
		if seen == nil {
			seen = map[qd]bool{}
		}
		seen[k] = true
		return true
	})
}

// keep returns the messages of msgs that ok accepts, in order; ok is called once
// per message, in order. It copies msgs only once ok refuses one: when ok accepts
// them all, it returns msgs itself.
func keep(msgs []Message, ok func(m *Message) bool) []Message {
	var out []Message
	for i := range msgs {
		switch {
		case ok(&msgs[i]):
			if out != nil {
				out = append(out, msgs[i])
			}
		case out == nil:
			out = append(make([]Message, 0, len(msgs)), msgs[:i]...)
		}
	}
	if out == nil {
		return msgs
	}
	return out
}

// DedupUntil is when m's DedupID, accepted at accepted, is forgotten (after its
// DedupWindow, or the default).
func (m *Message) DedupUntil(accepted time.Time) time.Time {
	if m.DedupWindow > 0 {
		return accepted.Add(m.DedupWindow)
	}
	return accepted.Add(DefaultDedupWindow)
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
	opts.MaxMessages = bound(opts.MaxMessages, DefaultMaxMessages)
	opts.MaxBytes = bound(opts.MaxBytes, DefaultMaxBytes)
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

// bound resolves a batch bound: zero means def, negative means none (math.MaxInt).
func bound(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return math.MaxInt
	}
	return v
}

// BatchSize returns how many of a key's n eligible messages, in id order, one batch
// takes under o.MaxMessages and o.MaxBytes (o as NormalizeDequeue returns it): the
// longest prefix within both bounds, and never fewer than one message when n > 0.
// size(i) is the payload size of message i.
func (o DequeueOptions) BatchSize(n int, size func(i int) int) int {
	total := 0
	for i := range n {
		total += size(i)
		if i > 0 && (i >= o.MaxMessages || total > o.MaxBytes) {
			return i
		}
	}
	return n
}

// CheckDequeueMax validates the batch count of DequeueBatches.
func CheckDequeueMax(op string, max int) error {
	if max < 1 {
		return invalid(op, "max", fmt.Sprintf("%d batches (want at least 1)", max))
	}
	return nil
}

// CheckSettlements validates what Settle can check without the batches: tokens,
// counts, delays, dead-letter queues and Then messages. An empty token is reported
// as lost, like any token that is not held. Use CheckSettlementSize once the
// batch's size is known.
func CheckSettlements(op string, ss []Settlement) error {
	seen := make(map[string]bool, len(ss))
	for i, s := range ss {
		field := func(name string) string { return fmt.Sprintf("settlement %d: %s", i, name) }
		if s.Token != "" && seen[s.Token] {
			return invalid(op, field("Token"), "the token appears twice in one call")
		}
		seen[s.Token] = true
		for _, f := range []struct {
			name string
			v    int
		}{{"Acked", s.Acked}, {"DeadLettered", s.DeadLettered}, {"Tried", s.Tried}} {
			if f.v < 0 {
				return invalid(op, field(f.name), fmt.Sprintf("negative count %d", f.v))
			}
		}
		if s.Delay < 0 {
			return invalid(op, field("Delay"), fmt.Sprintf("negative delay %v", s.Delay))
		}
		if s.DeadLettered > 0 {
			if err := checkName(op, field("DeadLetterQueue"), s.DeadLetterQueue, true); err != nil {
				return err
			}
		}
		if err := CheckMessages(op, s.Then); err != nil {
			return err
		}
	}
	return nil
}

// CheckSettlementSize validates s against its batch, which (still) holds n messages
// of queue; i is the settlement's index in its call.
func CheckSettlementSize(op string, i int, s Settlement, queue string, n int) error {
	field := func(name string) string { return fmt.Sprintf("settlement %d: %s", i, name) }
	if s.Acked+s.DeadLettered > n {
		return invalid(op, field("Acked+DeadLettered"), fmt.Sprintf("%d+%d messages settled but the batch holds %d", s.Acked, s.DeadLettered, n))
	}
	if s.DeadLettered > 0 && s.DeadLetterQueue == queue {
		return invalid(op, field("DeadLetterQueue"), "must differ from the batch's queue")
	}
	return nil
}

// Split says how s divides a batch of n messages, in batch order: Messages[:acked]
// are acked, [acked:dead] dead-lettered, [dead:tried] released as tried and
// [tried:] released as not tried. Call it after CheckSettlementSize.
func (s Settlement) Split(n int) (acked, dead, tried int) {
	acked = s.Acked
	dead = acked + s.DeadLettered
	tried = dead + min(s.Tried, n-dead)
	return acked, dead, tried
}

// HoldsKey reports whether settling s (on a keyed batch of n messages) keeps the
// key locked after it: released messages wait for a Delay without ReleaseKey.
func (s Settlement) HoldsKey(n int) bool {
	return s.Delay > 0 && !s.ReleaseKey && s.Acked+s.DeadLettered < n
}

// ClippedReason returns s.Reason truncated to MaxReasonSize.
func (s Settlement) ClippedReason() string { return TruncateUTF8(s.Reason, MaxReasonSize) }

// AbandonSettlement is the Settlement that Abandon(token, o) performs.
func AbandonSettlement(token string, o AbandonOptions) Settlement {
	tried := math.MaxInt
	if o.IgnoreAttempt {
		tried = 0
	}
	return Settlement{Token: token, Delay: o.Delay, Tried: tried, Reason: o.Reason, ReleaseKey: o.ReleaseKey}
}

// CheckPeek validates PeekOptions for queue and fills in the default limit.
func CheckPeek(op, queue string, o PeekOptions) (PeekOptions, error) {
	if err := CheckQueue(op, queue); err != nil {
		return o, err
	}
	if err := checkName(op, "RoutingKey", o.RoutingKey, false); err != nil {
		return o, err
	}
	switch o.State {
	case "", StateReady, StateDelayed, StateLocked:
	default:
		return o, invalid(op, "State", fmt.Sprintf("%q (want %q, %q, %q or empty)", Clip(string(o.State)), StateReady, StateDelayed, StateLocked))
	}
	switch {
	case o.Limit < 0 || o.Limit > MaxPeek:
		return o, invalid(op, "Limit", fmt.Sprintf("%d (want 0 to %d)", o.Limit, MaxPeek))
	case o.Limit == 0:
		o.Limit = DefaultPeek
	}
	return o, nil
}

// CheckRedrive validates a Redrive call.
func CheckRedrive(op, queue string, o RedriveOptions) error {
	if o.To != "" && o.To == queue {
		return invalid(op, "To", "must differ from the dead-letter queue")
	}
	return errors.Join(CheckQueue(op, queue), checkName(op, "RoutingKey", o.RoutingKey, false), checkName(op, "To", o.To, false))
}

// CheckPurge validates a Purge call.
func CheckPurge(op, queue string, o PurgeOptions) error {
	return errors.Join(CheckQueue(op, queue), checkName(op, "RoutingKey", o.RoutingKey, false))
}

func checkName(op, field, v string, required bool) error {
	if reason := nameProblem(v, required); reason != "" {
		return invalid(op, field, reason)
	}
	return nil
}

// nameProblem says what is wrong with v as a name, or "" if nothing is.
func nameProblem(v string, required bool) string {
	switch {
	case v == "" && required:
		return "must not be empty"
	case len(v) > MaxNameSize:
		return fmt.Sprintf("%d bytes exceeds the limit of %d bytes", len(v), MaxNameSize)
	// Every backend must be able to store what one accepts (PostgreSQL text holds
	// neither invalid UTF-8 nor NUL).
	case !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0:
		return "must be valid UTF-8 without NUL bytes"
	}
	return ""
}
