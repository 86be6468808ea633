package mq

import (
	"fmt"
	"time"
)

// Bounds of a Limit.
const (
	// MaxLimitPer is the longest Limit.Per.
	MaxLimitPer = 24 * time.Hour
	// MaxLimitValue bounds Limit.MaxInFlight and Limit.Rate.
	MaxLimitValue = 1 << 30
)

// Limit bounds the delivery of a queue's messages, or of one limit group's (see
// Message.LimitGroup), for every consumer of the backend's storage: every process
// sharing the database counts against the same limit, and the database enforces it
// inside the dequeue, so processes never exceed it together. Set it with
// Admin.SetLimit; the zero Limit means no limit.
type Limit struct {
	// MaxInFlight is the most batches held at once: a batch counts from its dequeue
	// until it is acked, settled or abandoned, or its lock lapses. Zero means no
	// bound.
	MaxInFlight int
	// Rate is how many messages may be delivered per Per, as a token bucket that
	// holds at most Rate tokens (a full bucket allows a burst of Rate messages):
	// over any interval of length t, at most Rate + Rate·t/Per messages are
	// delivered. Every message of a batch takes a token; a keyed batch is cut to
	// the tokens left (its other messages wait behind it, as with MaxMessages).
	// Zero means no bound.
	Rate int
	// Per is the interval of Rate: required with a Rate, at most MaxLimitPer.
	Per time.Duration
}

// LimitInfo is one limit of a queue as Admin.Limits lists it.
type LimitInfo struct {
	// Group is the limit group ("" for the limit of the queue as a whole).
	Group string
	Limit
	// InFlight is how many batches the group (or the queue) holds now.
	InFlight int
}

// CheckLimit validates a Limit for op, for the limit group group of queue.
func CheckLimit(op, queue, group string, l Limit) error {
	if err := CheckQueue(op, queue); err != nil {
		return err
	}
	if err := checkName(op, "group", group, false); err != nil {
		return err
	}
	switch {
	case l.MaxInFlight < 0 || l.MaxInFlight > MaxLimitValue:
		return invalid(op, "MaxInFlight", fmt.Sprintf("%d is outside [0, %d]", l.MaxInFlight, MaxLimitValue))
	case l.Rate < 0 || l.Rate > MaxLimitValue:
		return invalid(op, "Rate", fmt.Sprintf("%d is outside [0, %d]", l.Rate, MaxLimitValue))
	case l.Rate > 0 && (l.Per <= 0 || l.Per > MaxLimitPer):
		return invalid(op, "Per", fmt.Sprintf("%v is outside (0, %v]", l.Per, MaxLimitPer))
	case l.Rate == 0 && l.Per != 0:
		return invalid(op, "Per", "an interval needs a Rate")
	}
	return nil
}

// LimitGroups lists the limit group of each message of b: what the batch counts
// against. For backends.
func LimitGroups(b *Batch) []string {
	groups := make([]string, len(b.Messages))
	for i, d := range b.Messages {
		groups[i] = d.LimitGroup
	}
	return groups
}
