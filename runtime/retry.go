package runtime

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrActivityTimeout is the error of an activity attempt that outlived its
// RetryPolicy.Timeout; a timed-out call is not retried.
var ErrActivityTimeout = errors.New("runtime: activity attempt timed out")

// Backoff computes the delay before retry attempt n+1 after attempt n failed (n ≥ 1).
type Backoff interface {
	// Delay returns how long to wait after the given attempt (1 for the first)
	// failed before the next one starts; 0 retries at once.
	Delay(attempt int) time.Duration
}

// NoBackoff retries at once.
type NoBackoff struct{}

// Delay implements Backoff.
func (NoBackoff) Delay(int) time.Duration { return 0 }

// FixedBackoff waits the same delay before every retry.
type FixedBackoff struct {
	Interval time.Duration // the delay before each retry
}

// Delay implements Backoff.
func (b FixedBackoff) Delay(int) time.Duration { return b.Interval }

// LinearBackoff waits Base×attempt, capped at Max (0: no cap).
type LinearBackoff struct {
	Base, Max time.Duration // the delay per attempt, and the largest delay (0: no cap)
}

// Delay implements Backoff.
func (b LinearBackoff) Delay(attempt int) time.Duration {
	return capDelay(b.Base*time.Duration(attempt), b.Max, b.Base > 0 && attempt > int(maxDelay/b.Base))
}

// ExponentialBackoff waits Base×Multiplier^(attempt−1), capped at Max (0: no cap).
type ExponentialBackoff struct {
	Base       time.Duration // the delay before the first retry
	Multiplier float64       // the growth per attempt; below 1 counts as 1
	Max        time.Duration // the largest delay (0: no cap)
}

// Delay implements Backoff. A multiplier below 1 counts as 1 (delays never shrink).
func (b ExponentialBackoff) Delay(attempt int) time.Duration {
	d := float64(b.Base) * math.Pow(max(b.Multiplier, 1), float64(max(attempt-1, 0)))
	return capDelay(time.Duration(min(d, float64(maxDelay))), b.Max, false)
}

// maxDelay bounds every computed delay so the arithmetic cannot overflow.
const maxDelay = 365 * 24 * time.Hour

func capDelay(d, limit time.Duration, overflowed bool) time.Duration {
	if overflowed || d > maxDelay {
		d = maxDelay
	}
	if limit > 0 && d > limit {
		d = limit
	}
	return d
}

// RetryPolicy makes ScheduleActivityWithRetry try an activity up to MaxAttempts
// times, waiting Backoff between attempts (durable timers, so restarts keep the
// schedule). Each attempt is its own ActivityScheduled event.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt; default 3.
	MaxAttempts int
	// Timeout bounds each attempt (0: none); a timed-out attempt fails the call with
	// ErrActivityTimeout and is not retried.
	Timeout time.Duration
	// Backoff between attempts; default exponential from 100 ms, ×2, capped at 30 s.
	Backoff Backoff
}

// DefaultRetryPolicy is duroxide's default: 3 attempts, 100 ms ×2 up to 30 s.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 3, Backoff: ExponentialBackoff{Base: 100 * time.Millisecond, Multiplier: 2, Max: 30 * time.Second}}
}

// ScheduleActivityWithRetry schedules activity name and retries it by policy while
// it fails; the future gives the first success or the last failure. opts (session,
// tag) apply to every attempt.
func (c *Context) ScheduleActivityWithRetry(name, input string, policy RetryPolicy, opts ...ActivityOption) *Future {
	def := DefaultRetryPolicy()
	if policy.MaxAttempts < 1 {
		policy.MaxAttempts = def.MaxAttempts
	}
	if policy.Backoff == nil {
		policy.Backoff = def.Backoff
	}
	f := &Future{e: c.e}
	var attempt int
	var act, timeout, backoff *Future
	f.step = func() {
		for !f.done {
			switch {
			case backoff != nil:
				if !backoff.Done() {
					return
				}
				backoff = nil
			case act == nil:
				attempt++
				act = c.ScheduleActivity(name, input, opts...)
				if policy.Timeout > 0 {
					timeout = c.CreateTimer(policy.Timeout)
				}
			case act.Done():
				if timeout != nil {
					timeout.cancelled = true // timers need no cancellation event
				}
				if act.err == nil || attempt >= policy.MaxAttempts {
					f.resolve(act.result, act.err)
					return
				}
				act, timeout = nil, nil
				if d := policy.Backoff.Delay(attempt); d > 0 {
					backoff = c.CreateTimer(d)
				}
			case timeout != nil && timeout.Done():
				act.giveUp("attempt timed out")
				f.resolve("", fmt.Errorf("%w: %s attempt %d after %s", ErrActivityTimeout, name, attempt, policy.Timeout))
			default:
				return
			}
		}
	}
	f.cancel = func() {
		for _, inner := range []*Future{act, timeout, backoff} {
			if inner != nil {
				inner.giveUp("not awaited")
			}
		}
	}
	f.step() // the first attempt is scheduled now, like any activity
	return f
}
