package wake

import (
	"context"
	"time"
)

// Poll runs a long poll: it calls try until try reports a result, fails, or wait has
// elapsed. Between tries it sleeps until queue is notified on hub, until the time try
// gave as the next moment something may become available (zero: unknown), or until
// the deadline, whichever comes first. now is the caller's clock, used to turn try's
// hint into a duration. With wait == 0, try runs exactly once.
func Poll[T any](ctx context.Context, hub *Hub, queue string, wait time.Duration, now func() time.Time,
	try func() (result T, ok bool, next time.Time, err error)) (T, error) {
	var zero T
	deadline := time.Now().Add(wait)
	for {
		changed := hub.Chan(queue)
		res, ok, next, err := try()
		if err != nil || ok {
			return res, err
		}
		sleep := time.Until(deadline)
		if sleep <= 0 {
			return zero, nil
		}
		if !next.IsZero() {
			// A millisecond of slack so we wake after, not just before, the moment.
			sleep = min(sleep, next.Sub(now())+time.Millisecond)
		}
		t := time.NewTimer(max(sleep, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, ctx.Err()
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}
