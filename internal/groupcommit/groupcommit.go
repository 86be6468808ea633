package groupcommit

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// Group groups the requests of type T given to Do into rounds applied by apply.
type Group[T any] struct {
	apply func(ctx context.Context, items []T) error

	rounds atomic.Int64 // rounds applied (a failed round applied again counts once)

	mu      sync.Mutex
	pending []*request[T]
	running bool // a round is being applied or handed to its leader
}

// Rounds reports how many rounds g applied: how many transactions the requests
// shared, when every round succeeds.
func (g *Group[T]) Rounds() int64 { return g.rounds.Load() }

// New returns a Group whose rounds apply calls with every request of the round, in
// the order they came; apply must be all or nothing.
func New[T any](apply func(ctx context.Context, items []T) error) *Group[T] {
	return &Group[T]{apply: apply}
}

type request[T any] struct {
	ctx   context.Context
	item  T
	taken bool               // in a round (guarded by Group.mu): it can no longer be withdrawn
	lead  chan []*request[T] // the round this request's caller is to lead
	done  chan error         // its outcome
}

// Do applies item in a round shared with the callers waiting at the same time and
// returns its outcome. If ctx ends before a round took the request, Do withdraws it
// and returns ctx's error; once taken, Do waits for the outcome, so that work
// reported as failed was not applied. The round runs until every one of its callers'
// contexts has ended.
func (g *Group[T]) Do(ctx context.Context, item T) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &request[T]{ctx: ctx, item: item, lead: make(chan []*request[T], 1), done: make(chan error, 1)}
	g.mu.Lock()
	if !g.running {
		g.running = true
		r.taken = true
		g.mu.Unlock()
		g.run([]*request[T]{r})
		return <-r.done
	}
	g.pending = append(g.pending, r)
	g.mu.Unlock()
	cancelled := ctx.Done()
	for {
		select {
		case round := <-r.lead:
			g.run(round)
		case err := <-r.done:
			return err
		case <-cancelled:
			g.mu.Lock()
			if !r.taken {
				g.pending = slices.DeleteFunc(g.pending, func(p *request[T]) bool { return p == r })
				g.mu.Unlock()
				return ctx.Err()
			}
			g.mu.Unlock()
			cancelled = nil // taken: wait for the outcome, leading the round if handed one
		}
	}
}

// run applies round, reports each outcome, then hands the requests that came
// meanwhile to the first of them as the next round, or ends the run.
func (g *Group[T]) run(round []*request[T]) {
	g.applyRound(round)
	g.mu.Lock()
	next := g.pending
	g.pending = nil
	if len(next) == 0 {
		g.running = false
		g.mu.Unlock()
		return
	}
	for _, r := range next {
		r.taken = true
	}
	g.mu.Unlock()
	next[0].lead <- next
}

// applyRound applies round in one call, or request by request if that failed.
func (g *Group[T]) applyRound(round []*request[T]) {
	g.rounds.Add(1)
	ctx, cancel := roundContext(round)
	defer cancel()
	items := make([]T, len(round))
	for i, r := range round {
		items[i] = r.item
	}
	err := g.apply(ctx, items)
	if err == nil || len(round) == 1 || ctx.Err() != nil {
		for _, r := range round {
			r.done <- err
		}
		return
	}
	for _, r := range round {
		r.done <- g.apply(ctx, []T{r.item})
	}
}

// roundContext returns a context that ends when every request's context has
// ended: a round is abandoned only when none of its callers still wants it. A
// round of one request runs in its context, which may never end: SQLite's driver
// runs each statement of a context that can end on a goroutine of its own.
func roundContext[T any](round []*request[T]) (context.Context, context.CancelFunc) {
	if len(round) == 1 {
		return round[0].ctx, func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(round[0].ctx))
	var left atomic.Int64
	left.Store(int64(len(round)))
	stops := make([]func() bool, len(round))
	for i, r := range round {
		stops[i] = context.AfterFunc(r.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
