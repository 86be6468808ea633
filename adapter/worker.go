package adapter

import (
	"context"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/runtime"
)

// FetchWorkItem implements runtime.Provider: one message of the worker queue.
func (p *Provider) FetchWorkItem(ctx context.Context, o runtime.WorkFetchOptions) (*runtime.WorkItemLease, error) {
	const op = "fetch_work_item"
	opts := mq.DequeueOptions{LockTimeout: o.LockTimeout, Wait: o.PollTimeout, Tags: tagFilter(o.Tags)}
	if s := o.Session; s != nil {
		opts.Session = &mq.SessionOptions{Owner: s.OwnerID, LeaseTimeout: s.LockTimeout}
	}
	b, err := p.q.DequeueBatch(ctx, p.workQ, opts)
	if err != nil || b == nil {
		return nil, classify(op, err)
	}
	d := b.Messages[0]
	item, err := runtime.UnmarshalWorkItem(d.Payload)
	if err != nil {
		_ = p.q.Abandon(ctx, b.Token, mq.AbandonOptions{Delay: p.orphan})
		return nil, runtime.Permanent(op, err)
	}
	p.writes.Add(1)
	return &runtime.WorkItemLease{Item: item, LockToken: b.Token, AttemptCount: uint32(d.Attempt)}, nil
}

// AckWorkItem implements runtime.Provider: the item's deletion and its completion's
// enqueue are one atomic queue Ack.
func (p *Provider) AckWorkItem(ctx context.Context, token string, completion *runtime.WorkItem) error {
	const op = "ack_work_item"
	var then []mq.Message
	if completion != nil {
		m, err := p.orchMessage(completion, 0)
		if err != nil {
			return classify(op, err)
		}
		then = append(then, m)
	}
	return p.wrote(op, p.q.Ack(ctx, token, then...))
}

// AbandonWorkItem implements runtime.Provider.
func (p *Provider) AbandonWorkItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	return p.wrote("abandon_work_item", p.q.Abandon(ctx, token, mq.AbandonOptions{Delay: max(delay, 0), IgnoreAttempt: ignoreAttempt}))
}

// RenewWorkItemLock implements runtime.Provider.
func (p *Provider) RenewWorkItemLock(ctx context.Context, token string, extend time.Duration) error {
	_, err := p.q.Renew(ctx, token, extend)
	return p.wrote("renew_work_item_lock", err)
}

// RenewSessionLock implements runtime.Provider.
func (p *Provider) RenewSessionLock(ctx context.Context, owners []string, extend, idleTimeout time.Duration) (int, error) {
	n, err := p.q.RenewSessions(ctx, p.workQ, owners, extend, idleTimeout)
	return n, classify("renew_session_lock", err)
}

// CleanupOrphanedSessions implements runtime.Provider: sessions whose lease lapsed
// and that have no pending item are forgotten (the idle timeout is not needed: a
// lapsed lease already means no owner is renewing).
func (p *Provider) CleanupOrphanedSessions(ctx context.Context, _ time.Duration) (int, error) {
	n, err := p.q.CleanupSessions(ctx, p.workQ)
	return n, classify("cleanup_orphaned_sessions", err)
}

// EnqueueForWorker implements runtime.Provider.
func (p *Provider) EnqueueForWorker(ctx context.Context, item runtime.WorkItem) error {
	const op = "enqueue_for_worker"
	m, err := p.workMessage(&item)
	if err != nil {
		return classify(op, err)
	}
	return p.wrote(op, p.q.Enqueue(ctx, m))
}
