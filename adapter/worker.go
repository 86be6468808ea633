package adapter

import (
	"context"
	"fmt"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/runtime/provider"
)

// FetchWorkItem implements provider.Provider: one message of the worker queue.
func (p *Provider) FetchWorkItem(ctx context.Context, o provider.WorkFetchOptions) (*provider.WorkItemLease, error) {
	const op = "fetch_work_item"
	opts := workDequeueOptions(o)
	opts.Wait = o.PollTimeout
	b, err := p.q.DequeueBatch(ctx, p.workQ, opts)
	if err != nil || b == nil {
		return nil, classify(op, err)
	}
	p.writes.Add(1)
	if lease := p.workLease(ctx, b); lease != nil {
		return lease, nil
	}
	return nil, provider.Permanent(op, fmt.Errorf("worker message %d cannot be decoded; it is offered again after %v", b.Messages[0].ID, p.orphan))
}

func workDequeueOptions(o provider.WorkFetchOptions) mq.DequeueOptions {
	opts := mq.DequeueOptions{LockTimeout: o.LockTimeout, Tags: tagFilter(o.Tags)}
	if s := o.Session; s != nil {
		opts.Session = &mq.SessionOptions{Owner: s.OwnerID, LeaseTimeout: s.LockTimeout}
	}
	return opts
}

// workLease decodes a locked worker message; one nobody can read is abandoned (its
// attempt counted) and nil returned.
func (p *Provider) workLease(ctx context.Context, b *mq.Batch) *provider.WorkItemLease {
	d := b.Messages[0]
	item, err := provider.UnmarshalWorkItem(d.Payload)
	if err != nil {
		p.log.Warn("undecodable worker message", "id", d.ID, "err", err)
		_ = p.q.Abandon(ctx, b.Token, mq.AbandonOptions{Delay: p.orphan})
		return nil
	}
	return &provider.WorkItemLease{Item: item, LockToken: b.Token, AttemptCount: uint32(d.Attempt)}
}

// AckWorkItem implements provider.Provider: the item's deletion and its completion's
// enqueue are one atomic queue Ack.
func (p *Provider) AckWorkItem(ctx context.Context, token string, completion *provider.WorkItem) error {
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

// AbandonWorkItem implements provider.Provider.
func (p *Provider) AbandonWorkItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	return p.wrote("abandon_work_item", p.q.Abandon(ctx, token, mq.AbandonOptions{Delay: max(delay, 0), IgnoreAttempt: ignoreAttempt}))
}

// RenewWorkItemLock implements provider.Provider.
func (p *Provider) RenewWorkItemLock(ctx context.Context, token string, extend time.Duration) error {
	_, err := p.q.Renew(ctx, token, extend)
	return p.wrote("renew_work_item_lock", err)
}

// RenewSessionLock implements provider.Provider.
func (p *Provider) RenewSessionLock(ctx context.Context, owners []string, extend, idleTimeout time.Duration) (int, error) {
	n, err := p.q.RenewSessions(ctx, p.workQ, owners, extend, idleTimeout)
	return n, classify("renew_session_lock", err)
}

// CleanupOrphanedSessions implements provider.Provider: sessions whose lease lapsed
// and that have no pending item are forgotten (the idle timeout is not needed: a
// lapsed lease already means no owner is renewing).
func (p *Provider) CleanupOrphanedSessions(ctx context.Context, _ time.Duration) (int, error) {
	n, err := p.q.CleanupSessions(ctx, p.workQ)
	return n, classify("cleanup_orphaned_sessions", err)
}

// EnqueueForWorker implements provider.Provider.
func (p *Provider) EnqueueForWorker(ctx context.Context, item provider.WorkItem) error {
	const op = "enqueue_for_worker"
	m, err := p.workMessage(&item)
	if err != nil {
		return classify(op, err)
	}
	return p.enqueued(op, p.q.Enqueue(ctx, m))
}
