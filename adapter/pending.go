package adapter

import (
	"context"
	"fmt"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/runtime/provider"
)

var (
	_ provider.PendingStartReader = (*Provider)(nil)
	_ provider.ReasonAbandoner    = (*Provider)(nil)
)

// AbandonOrchestrationItemWithReason implements provider.ReasonAbandoner: the queue
// keeps reason (clipped to mq.MaxReasonSize) as the last error of the messages whose
// attempt counts, where PendingStart finds it.
func (p *Provider) AbandonOrchestrationItemWithReason(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool, reason string) error {
	return p.wrote("abandon_orchestration_item", p.q.Abandon(ctx, token,
		// duroxide lets the instance go at once; its messages carry their own order.
		mq.AbandonOptions{Delay: max(delay, 0), IgnoreAttempt: ignoreAttempt, Reason: reason, ReleaseKey: true}))
}

// pendingPeekPage is how many of an instance's orchestrator messages PendingStart
// reads at a time: the start is almost always the first, and payloads may be large.
const pendingPeekPage = 16

// PendingStart implements provider.PendingStartReader by peeking at the instance's
// orchestrator messages (the instance is their routing key) for the oldest start,
// locked or not. A queue without mq.Admin shows none.
func (p *Provider) PendingStart(ctx context.Context, instance string) (*provider.PendingStart, error) {
	const op = "pending_start"
	if instance == "" {
		// An empty routing key would peek at every instance's messages.
		return nil, provider.Permanent(op, fmt.Errorf("%w: empty instance id", provider.ErrInvalid))
	}
	a, ok := p.q.(mq.Admin)
	if !ok {
		return nil, nil
	}
	opts := mq.PeekOptions{RoutingKey: instance, Limit: pendingPeekPage}
	for {
		msgs, err := a.Peek(ctx, p.orchQ, opts)
		if err != nil {
			return nil, classify(op, err)
		}
		for _, m := range msgs {
			// An unreadable message is not a start anyone can run; the dispatcher
			// reports it when it fetches the instance.
			if item, err := provider.UnmarshalWorkItem(m.Payload); err == nil && item.Kind == provider.WorkStartOrchestration {
				return &provider.PendingStart{Name: item.Name, Version: item.Version, Attempts: m.Attempt,
					LastError: m.LastError, EnqueuedAt: m.EnqueuedAt}, nil
			}
		}
		if len(msgs) < opts.Limit {
			return nil, nil
		}
		opts.AfterID = msgs[len(msgs)-1].ID
	}
}
