package adapter

import (
	"context"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/runtime/provider"

	"github.com/duroq/duroq/mq"
)

var _ provider.BatchProvider = (*Provider)(nil)

// claimTimeout bounds a transaction that locks work, which the caller's context
// does not cut short (see dequeueMany).
const claimTimeout = 30 * time.Second

// FetchOrchestrationItems implements provider.BatchProvider: the routing-key batches
// of up to max instances are locked in one transaction, then each is read like a
// single fetch. With nothing ready it long-polls for one.
func (p *Provider) FetchOrchestrationItems(ctx context.Context, o provider.FetchOptions, max int) ([]*provider.OrchestrationItem, error) {
	const op = "fetch_orchestration_items"
	var states map[string]*eventstore.StreamState
	batches, err := p.dequeueMany(ctx, p.orchQ, mq.DequeueOptions{LockTimeout: o.LockTimeout, KeyAttr: attrRanges(o.Filter)}, max,
		func(tx turnTx, batches []*mq.Batch) (err error) {
			instances := make([]string, len(batches))
			for i, b := range batches {
				instances[i] = b.RoutingKey
			}
			states, err = tx.s.ReadStates(ctx, instances)
			return err
		})
	if err != nil {
		return nil, classify(op, err)
	}
	if len(batches) == 0 {
		item, err := p.FetchOrchestrationItem(ctx, o)
		if item == nil {
			return nil, err
		}
		return []*provider.OrchestrationItem{item}, err
	}
	items := make([]*provider.OrchestrationItem, 0, len(batches))
	for i, b := range batches {
		item, err := p.orchestrationItem(ctx, b, states[b.RoutingKey])
		if err != nil {
			// Release what this call locked but cannot hand over.
			for _, rest := range batches[i+1:] {
				_ = p.q.Abandon(context.WithoutCancel(ctx), rest.Token, mq.AbandonOptions{IgnoreAttempt: true})
			}
			for _, it := range items {
				_ = p.q.Abandon(context.WithoutCancel(ctx), it.LockToken, mq.AbandonOptions{IgnoreAttempt: true})
			}
			return nil, err
		}
		if item != nil {
			items = append(items, item)
		}
	}
	return items, nil
}

// dequeueMany locks up to max batches of queue in one transaction, in which then
// (when not nil) reads what the batches need.
// The transaction runs to its end even if ctx ends meanwhile: cut short in its
// commit, it could commit unreported and hold the batches until their locks lapse.
// The caller gets what was locked and releases what it will not handle.
func (p *Provider) dequeueMany(ctx context.Context, queue string, opts mq.DequeueOptions, max int, then func(tx turnTx, batches []*mq.Batch) error) ([]*mq.Batch, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	var batches []*mq.Batch
	err := p.b.run(ctx, func(tx turnTx) (err error) {
		batches, err = tx.q.DequeueBatches(ctx, queue, opts, max)
		if err == nil && then != nil && len(batches) > 0 {
			err = then(tx, batches)
		}
		return err
	})
	if err == nil && len(batches) > 0 {
		p.writes.Add(1)
	}
	return batches, err
}

// AckOrchestrationItems implements provider.BatchProvider: every turn commits in one
// transaction, or none does.
func (p *Provider) AckOrchestrationItems(ctx context.Context, acks []provider.TurnAck) error {
	const op = "ack_orchestration_items"
	commits := make([]*turnCommit, len(acks))
	for i, a := range acks {
		c, err := p.prepareAck(a.Token, a.Ack)
		if err != nil {
			return classify(op, err)
		}
		commits[i] = c
	}
	return p.commitTurns(ctx, op, commits)
}

// FetchWorkItems implements provider.BatchProvider: up to max worker items locked in
// one transaction; with nothing ready it long-polls for one.
func (p *Provider) FetchWorkItems(ctx context.Context, o provider.WorkFetchOptions, max int) ([]*provider.WorkItemLease, error) {
	const op = "fetch_work_items"
	batches, err := p.dequeueMany(ctx, p.workQ, workDequeueOptions(o), max, nil)
	if err != nil {
		return nil, classify(op, err)
	}
	if len(batches) == 0 {
		lease, err := p.FetchWorkItem(ctx, o)
		if lease == nil {
			return nil, err
		}
		return []*provider.WorkItemLease{lease}, err
	}
	leases := make([]*provider.WorkItemLease, 0, len(batches))
	for _, b := range batches {
		if lease := p.workLease(ctx, b); lease != nil {
			leases = append(leases, lease)
		}
	}
	return leases, nil
}

// AckWorkItems implements provider.BatchProvider: every item is acked with its
// completion enqueued in one transaction, or none is.
func (p *Provider) AckWorkItems(ctx context.Context, acks []provider.WorkAck) error {
	const op = "ack_work_items"
	var completions []mq.Message
	for _, a := range acks {
		if a.Completion != nil {
			m, err := p.orchMessage(a.Completion, 0)
			if err != nil {
				return classify(op, err)
			}
			completions = append(completions, m)
		}
	}
	tokens := make([]string, len(acks))
	for i, a := range acks {
		tokens[i] = a.Token
	}
	return p.wrote(op, p.b.run(ctx, func(tx turnTx) error {
		if _, err := tx.q.Ack(ctx, tokens...); err != nil {
			return err
		}
		return tx.q.Enqueue(ctx, completions...)
	}))
}
