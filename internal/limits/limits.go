// Package limits holds the arithmetic of mq's delivery limits (mq.Limit), shared by
// its backends: the token bucket of a rate and what one dequeue may still take
// under a queue's limits, given the batches in flight.
package limits

import (
	"maps"
	"math"
	"slices"
	"time"
)

// Rule is one limit of a queue as stored: Group "" is the queue's own limit. Tokens
// is the bucket's content at Refilled.
type Rule struct {
	Group       string
	MaxInFlight int // zero: no bound
	Rate        int // zero: no bound
	Per         time.Duration
	Tokens      float64
	Refilled    time.Time
}

// Available returns the tokens of r's bucket at now: refilled at Rate per Per since
// Refilled, never beyond Rate. A clock behind Refilled (another process's) adds
// nothing.
func (r Rule) Available(now time.Time) float64 {
	if r.Rate == 0 {
		return math.Inf(1)
	}
	t := r.Tokens
	if elapsed := now.Sub(r.Refilled); elapsed > 0 {
		t += float64(elapsed) * float64(r.Rate) / float64(r.Per)
	}
	return min(t, float64(r.Rate))
}

// Held is one locked message of a queue with a live lock: the token of its batch
// and its limit group ("" for none).
type Held struct {
	Token, Group string
}

// Budget is what one dequeue may still take under a queue's rules.
type Budget struct {
	now    time.Time
	queue  *entry            // nil: the queue has no limit of its own
	groups map[string]*entry // by group
}

type entry struct {
	rule     Rule
	inFlight int     // batches held
	tokens   float64 // available now, less what this dequeue took
	spent    bool    // this dequeue took tokens
}

// New returns the budget of a dequeue at now under rules, the batches in flight
// being those of held.
func New(now time.Time, rules []Rule, held []Held) *Budget {
	b := &Budget{now: now, groups: map[string]*entry{}}
	for _, r := range rules {
		e := &entry{rule: r, tokens: r.Available(now)}
		if r.Group == "" {
			b.queue = e
		} else {
			b.groups[r.Group] = e
		}
	}
	tokens := map[string]bool{}
	grouped := map[Held]bool{}
	for _, h := range held {
		if !tokens[h.Token] && b.queue != nil {
			b.queue.inFlight++
		}
		tokens[h.Token] = true
		if e := b.groups[h.Group]; e != nil && h.Group != "" && !grouped[h] {
			grouped[h] = true
			e.inFlight++
		}
	}
	return b
}

// InFlight returns how many batches the limit of group ("" for the queue's) holds.
func (b *Budget) InFlight(group string) int {
	e := b.queue
	if group != "" {
		e = b.groups[group]
	}
	if e == nil {
		return 0
	}
	return e.inFlight
}

func (e *entry) open() bool {
	return e == nil || (e.rule.MaxInFlight == 0 || e.inFlight < e.rule.MaxInFlight) && e.tokens >= 1
}

// Closed reports whether the queue's own limit admits no batch now.
func (b *Budget) Closed() bool { return !b.queue.open() }

// Blocked lists the groups whose limit admits no batch now, in name order: a
// dequeue skips their messages.
func (b *Budget) Blocked() []string {
	var out []string
	for g, e := range b.groups {
		if !e.open() {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
}

// MaxMessages is the most messages the next batch may take when its first message
// is of group: the tokens left of the rates that apply (math.MaxInt if none).
func (b *Budget) MaxMessages(group string) int {
	n := math.MaxInt
	for _, e := range []*entry{b.queue, b.groups[group]} {
		if e != nil && e.rule.Rate > 0 {
			n = min(n, int(e.tokens))
		}
	}
	return n
}

// Took counts a batch the dequeue took: groups lists the limit group of each of its
// messages ("" for none). The batch is in flight for the queue and once for each
// group, and each message takes a token of the queue's rate and of its group's.
func (b *Budget) Took(groups []string) {
	if e := b.queue; e != nil {
		e.inFlight++
		e.take(len(groups))
	}
	counted := map[string]bool{}
	for _, g := range groups {
		e := b.groups[g]
		if e == nil {
			continue
		}
		if !counted[g] {
			counted[g] = true
			e.inFlight++
		}
		e.take(1)
	}
}

func (e *entry) take(n int) {
	if e.rule.Rate > 0 {
		e.tokens -= float64(n)
		e.spent = true
	}
}

// Spent returns the rules whose buckets this dequeue drew from, with the tokens
// left at now: what the dequeue stores back.
func (b *Budget) Spent() []Rule {
	var out []Rule
	for _, e := range b.entries() {
		if e.spent {
			r := e.rule
			r.Tokens, r.Refilled = max(e.tokens, 0), b.now
			out = append(out, r)
		}
	}
	return out
}

// Refill returns when the earliest empty bucket of a rule that blocks holds a
// token again (zero if no rate blocks): how long a dequeue that found nothing
// may wait before it looks again. A bound on batches in flight ends with an ack,
// which wakes waiters anyway.
func (b *Budget) Refill() time.Time {
	var next time.Time
	for _, e := range b.entries() {
		if e.rule.Rate == 0 || e.tokens >= 1 {
			continue
		}
		at := b.now.Add(time.Duration((1 - e.tokens) * float64(e.rule.Per) / float64(e.rule.Rate)))
		if !at.After(b.now) {
			at = b.now.Add(time.Microsecond) // rounding: never "now" again
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

func (b *Budget) entries() []*entry {
	out := make([]*entry, 0, len(b.groups)+1)
	if b.queue != nil {
		out = append(out, b.queue)
	}
	for _, g := range slices.Sorted(maps.Keys(b.groups)) {
		out = append(out, b.groups[g])
	}
	return out
}

// Earliest returns the earlier of two times, zero meaning none: when a dequeue that
// found nothing looks again.
func Earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}
