package adapter

import (
	"context"
	"errors"
	"fmt"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/runtime/provider"
)

var _ provider.InstanceStarter = (*Provider)(nil)

// startKey is the message key of a start enqueued by StartInstance: the queue keeps
// one pending per instance, so a start pending is seen as the instance existing.
func startKey(instance string) string { return "start/" + instance }

// StartInstance implements provider.InstanceStarter. The start message carries the
// instance's start key, unique among the orchestrator queue's pending messages.
// StartReturnExisting is a plain (group-committed) enqueue of it, a pending start
// answering for the new one. The other policies enqueue it, then read the
// instance's state, in one transaction: a start pending fails the enqueue, and a
// first turn that committed meanwhile (taking the pending start and creating the
// instance at once) is seen by the read, which comes after the enqueue.
func (p *Provider) StartInstance(ctx context.Context, item provider.WorkItem, policy provider.StartPolicy) error {
	const op = "start_instance"
	if item.Kind != provider.WorkStartOrchestration {
		return classify(op, fmt.Errorf("%w: StartInstance takes a StartOrchestration, not %s", provider.ErrInvalid, item.Kind))
	}
	m, err := p.orchMessage(&item, 0)
	if err != nil {
		return classify(op, err)
	}
	m.Key = startKey(item.Instance)
	switch policy {
	case provider.StartReturnExisting:
		err := p.q.Enqueue(ctx, m)
		if errors.Is(err, mq.ErrDuplicateKey) {
			return nil // its start is pending: that one starts it
		}
		return p.enqueued(op, err)
	case provider.StartRejectExisting, provider.StartAfterEnded:
	default:
		return classify(op, fmt.Errorf("%w: unknown start policy %d", provider.ErrInvalid, policy))
	}
	exists := fmt.Errorf("%w: %q", provider.ErrInstanceExists, mq.Clip(item.Instance))
	return p.wrote(op, p.b.run(ctx, func(tx turnTx) error {
		if err := tx.q.Enqueue(ctx, m); err != nil {
			if errors.Is(err, mq.ErrDuplicateKey) {
				return fmt.Errorf("%w (its start is pending)", exists)
			}
			return err
		}
		states, err := tx.s.ReadStates(ctx, []string{item.Instance})
		if err != nil {
			return err
		}
		st := states[item.Instance]
		switch {
		case st == nil:
			return nil
		case policy == provider.StartRejectExisting:
			return exists
		case st.Info.Status != eventstore.StatusCompleted && st.Info.Status != eventstore.StatusFailed:
			return fmt.Errorf("%w (%s)", exists, st.Info.Status)
		}
		// Ended: the old instance goes (its queued messages with it, the start just
		// enqueued too), then the start is enqueued again.
		r, err := tx.s.Delete(ctx, []string{item.Instance}, eventstore.DeleteOptions{AllowNonRoot: true})
		if errors.Is(err, eventstore.ErrRunning) {
			return fmt.Errorf("%w (a descendant still runs)", exists)
		}
		if err != nil {
			return err
		}
		if _, err := p.purgeQueues(ctx, tx, r.StreamIDs); err != nil {
			return err
		}
		return tx.q.Enqueue(ctx, m)
	}))
}
