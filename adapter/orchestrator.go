package adapter

import (
	"context"
	"fmt"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/runtime/provider"
)

// FetchOrchestrationItem implements provider.Provider: one routing-key batch of the
// orchestrator queue (the capability filter is the key-attribute filter, applied
// before anything is locked), then the instance's current history.
func (p *Provider) FetchOrchestrationItem(ctx context.Context, o provider.FetchOptions) (*provider.OrchestrationItem, error) {
	const op = "fetch_orchestration_item"
	b, err := p.q.DequeueBatch(ctx, p.orchQ, mq.DequeueOptions{LockTimeout: o.LockTimeout, Wait: o.PollTimeout, KeyAttr: attrRanges(o.Filter)})
	if err != nil || b == nil {
		return nil, classify(op, err)
	}
	p.writes.Add(1) // the dequeue's transaction
	var states map[string]*eventstore.StreamState
	err = p.b.run(ctx, func(tx turnTx) (err error) {
		states, err = tx.s.ReadStates(ctx, []string{b.RoutingKey})
		return err
	})
	if err != nil {
		return nil, p.abandonAfter(ctx, op, b.Token, err)
	}
	return p.orchestrationItem(ctx, b, states[b.RoutingKey])
}

// orchestrationItem turns a locked batch of an instance's messages and its stored
// state (nil: none) into its item. It returns (nil, nil) after settling a batch
// that is not work (see newInstanceItem).
func (p *Provider) orchestrationItem(ctx context.Context, b *mq.Batch, st *eventstore.StreamState) (*provider.OrchestrationItem, error) {
	const op = "fetch_orchestration_item"
	var err error
	instance := b.RoutingKey
	msgs := make([]provider.WorkItem, len(b.Messages))
	for i, d := range b.Messages {
		if msgs[i], err = provider.UnmarshalWorkItem(d.Payload); err != nil {
			// A message nobody can read would block its instance forever unseen: keep
			// it (attempt counted) and say which one it is.
			_ = p.q.Abandon(ctx, b.Token, mq.AbandonOptions{Delay: p.orphan, ReleaseKey: true})
			return nil, provider.Permanent(op, fmt.Errorf("instance %q: orchestrator message %d: %w", instance, d.ID, err))
		}
	}
	item := &provider.OrchestrationItem{Instance: instance, Messages: msgs, LockToken: b.Token,
		AttemptCount: uint32(b.MaxAttempt()), ExecutionID: provider.InitialExecutionID}
	if st == nil {
		return p.newInstanceItem(ctx, item, b)
	}
	info := st.Info
	item.OrchestrationName, item.Version, item.ExecutionID = info.Name, info.Version, uint64(info.CurrentPartition)
	err = st.Corrupt
	if err == nil {
		item.History, err = fromStored(st.Events)
	}
	if err != nil {
		// Undecodable history is the runtime's to handle (poison): the lock stays held.
		item.History, item.HistoryError = nil, err.Error()
	}
	if item.OrchestrationName == "" {
		item.OrchestrationName, item.Version = nameFrom(item.History, msgs)
	}
	item.KVSnapshot = kvValues(st.KV)
	return item, nil
}

// newInstanceItem completes the item of an instance that has no stored state yet,
// fetched as b.
func (p *Provider) newInstanceItem(ctx context.Context, item *provider.OrchestrationItem, b *mq.Batch) (*provider.OrchestrationItem, error) {
	const op = "fetch_orchestration_item"
	name, version := nameFrom(nil, item.Messages)
	if name != "" {
		item.OrchestrationName, item.Version, item.KVSnapshot = name, version, map[string]provider.KVValue{}
		return item, nil
	}
	onlyQueueMessages := true
	for _, m := range item.Messages {
		onlyQueueMessages = onlyQueueMessages && m.Kind == provider.WorkQueueMessage
	}
	if onlyQueueMessages {
		// Queue messages for an instance that does not exist can never be consumed.
		p.log.Warn("dropping queue messages for an instance that does not exist",
			"instance", item.Instance, "messages", len(item.Messages))
		return nil, classify(op, p.q.Ack(ctx, item.LockToken))
	}
	// Other messages (a completion or a cancellation racing ahead of a start) wait,
	// for OrphanTTL at most: an instance that never comes would have them offered
	// again forever.
	var newest time.Time
	for _, d := range b.Messages {
		if d.EnqueuedAt.After(newest) {
			newest = d.EnqueuedAt
		}
	}
	if p.now().Sub(newest) > p.orphanTTL {
		p.log.Warn("dropping messages for an instance that was never started", "instance", item.Instance,
			"messages", len(item.Messages), "kind", item.Messages[0].Kind, "ttl", p.orphanTTL)
		return nil, classify(op, p.q.Ack(ctx, item.LockToken))
	}
	return nil, classify(op, p.q.Abandon(ctx, item.LockToken, mq.AbandonOptions{Delay: p.orphan, IgnoreAttempt: true, ReleaseKey: true}))
}

// abandonAfter releases a batch that could not be prepared and reports err.
func (p *Provider) abandonAfter(ctx context.Context, op, token string, err error) error {
	_ = p.q.Abandon(context.WithoutCancel(ctx), token, mq.AbandonOptions{IgnoreAttempt: true})
	return classify(op, err)
}

// nameFrom finds an orchestration's name and version in its history, else in a start
// or continue-as-new message.
func nameFrom(history []provider.Event, msgs []provider.WorkItem) (string, string) {
	for _, e := range history {
		if e.Kind == provider.EventOrchestrationStarted {
			return e.Name, e.Version
		}
	}
	for _, m := range msgs {
		if m.Kind == provider.WorkStartOrchestration || m.Kind == provider.WorkContinueAsNew {
			return m.Name, m.Version
		}
	}
	return "", ""
}

func kvValues(entries map[string]eventstore.KVEntry) map[string]provider.KVValue {
	out := make(map[string]provider.KVValue, len(entries))
	for k, e := range entries {
		out[k] = provider.KVValue{Value: e.Value, LastUpdatedAtMs: e.UpdatedAt.UnixMilli()}
	}
	return out
}

// AckOrchestrationItem implements provider.Provider in one transaction of the queue
// and the store.
func (p *Provider) AckOrchestrationItem(ctx context.Context, token string, a provider.OrchestrationAck) error {
	const op = "ack_orchestration_item"
	c, err := p.prepareAck(token, a)
	if err != nil {
		return classify(op, err)
	}
	return p.commitTurns(ctx, op, []*turnCommit{c})
}

// turnCommit is a turn's ack with everything encoded, ready to apply inside a
// transaction (which holds the write lock, so nothing slow happens there).
type turnCommit struct {
	p          *Provider
	token      string
	instance   string // known once its lock is acked (applyTurns)
	a          provider.OrchestrationAck
	events     []eventstore.Event
	enqueues   []mq.Message
	cancelKeys []string
	kv         []eventstore.KVMutation
	customStat **string
	execution  int64
	update     eventstore.StreamUpdate
	// startsExecution: the delta opens an execution (it holds its
	// OrchestrationStarted event).
	startsExecution bool
}

func (p *Provider) prepareAck(token string, a provider.OrchestrationAck) (*turnCommit, error) {
	events, err := toStored(a.HistoryDelta)
	if err != nil {
		return nil, err
	}
	c := &turnCommit{p: p, token: token, a: a, events: events, execution: int64(a.ExecutionID)}
	for _, e := range a.HistoryDelta {
		c.startsExecution = c.startsExecution || e.Kind == provider.EventOrchestrationStarted
	}
	for i := range a.WorkerItems {
		m, err := p.workMessage(&a.WorkerItems[i])
		if err != nil {
			return nil, err
		}
		c.enqueues = append(c.enqueues, m)
	}
	now := p.now()
	for i := range a.OrchestratorItems {
		item := &a.OrchestratorItems[i]
		var delay time.Duration
		if item.Kind == provider.WorkTimerFired {
			delay = time.UnixMilli(item.FireAtMs).Sub(now)
		}
		m, err := p.orchMessage(item, delay)
		if err != nil {
			return nil, err
		}
		c.enqueues = append(c.enqueues, m)
	}
	c.cancelKeys = make([]string, len(a.CancelledActivities))
	for i, x := range a.CancelledActivities {
		c.cancelKeys[i] = workKey(x.Instance, x.ExecutionID, x.ActivityID)
	}
	c.kv, c.customStat = deltaSideEffects(a.HistoryDelta)
	if c.execution < 1 {
		return nil, fmt.Errorf("%w: execution id %d", provider.ErrInvalid, a.ExecutionID)
	}
	c.update = eventstore.StreamUpdate{Partition: c.execution, Name: a.Metadata.OrchestrationName,
		Version: a.Metadata.OrchestrationVersion, Parent: a.Metadata.ParentInstanceID, Output: a.Metadata.Output}
	if s := a.Metadata.Status; s != nil {
		status := eventstore.Status(*s)
		c.update.Status = &status
	}
	if v := a.Metadata.PinnedVersion; v != nil {
		pinned := v.String()
		c.update.PinnedVersion = &pinned
	}
	return c, nil
}

// commitTurns commits turns in one transaction (applyTurns), then signals the
// instances a client may be waiting on (see WatchInstance).
func (p *Provider) commitTurns(ctx context.Context, op string, turns []*turnCommit) error {
	err := p.wrote(op, p.b.run(ctx, func(tx turnTx) error { return p.applyTurns(ctx, tx, turns) }))
	if p.signals != nil && err == nil {
		var names []string
		for _, c := range turns {
			if c.update.Status != nil || c.customStat != nil || len(c.kv) > 0 {
				names = append(names, p.signalName(c.instance))
			}
		}
		p.signals.Signal(names...)
	}
	return err
}

// applyTurns commits turns inside tx. The acks come first, in one call: they prove
// each lock is still held and name each instance. The events and metadata of all
// turns follow in one bulk commit, then what only some turns have.
func (p *Provider) applyTurns(ctx context.Context, tx turnTx, turns []*turnCommit) error {
	tokens := make([]string, len(turns))
	for i, c := range turns {
		tokens[i] = c.token
	}
	locks, err := tx.q.Ack(ctx, tokens...)
	if err != nil {
		return err
	}
	var bulk []eventstore.StreamCommit
	for i, c := range turns {
		if locks[i].Queue != p.orchQ {
			return fmt.Errorf("%w: token %q holds a message of queue %q, not the orchestrator queue", provider.ErrLockLost, c.token, locks[i].Queue)
		}
		instance := locks[i].RoutingKey
		c.instance = instance
		if len(c.kv) == 0 {
			if len(c.events) > 0 || c.update != (eventstore.StreamUpdate{Partition: c.execution}) {
				// A turn that records and changes nothing (messages dropped for an
				// ended execution) writes nothing: the instance's UpdatedAt stays
				// when it last changed.
				bulk = append(bulk, eventstore.StreamCommit{Stream: instance, Events: c.events, Update: c.update})
			}
			continue
		}
		// KV goes before a status that ends the execution, so the merge includes
		// this turn's writes; it needs the stream to exist.
		if len(c.events) > 0 {
			if err := tx.s.Append(ctx, instance, c.execution, c.events); err != nil {
				return err
			}
		} else if err := tx.s.Update(ctx, instance, eventstore.StreamUpdate{Partition: c.execution}); err != nil {
			return err
		}
		if err := tx.s.ApplyKV(ctx, instance, c.execution, c.kv); err != nil {
			return err
		}
		if err := tx.s.Update(ctx, instance, c.update); err != nil {
			return err
		}
	}
	if err := tx.s.Commit(ctx, bulk); err != nil {
		return err
	}
	var (
		enqueues   []mq.Message
		cancelKeys []string
		pinKeys    []string // instances whose version pin is set (or cleared: nil)
		pins       []*int64
	)
	for i, c := range turns {
		instance := locks[i].RoutingKey
		if c.customStat != nil {
			if _, err := tx.s.SetCustomStatus(ctx, instance, *c.customStat); err != nil {
				return err
			}
		}
		if v := c.a.Metadata.PinnedVersion; v != nil {
			ord := v.Ordinal()
			pinKeys, pins = append(pinKeys, instance), append(pins, &ord)
		} else if c.startsExecution {
			// A new execution starts unpinned until told otherwise.
			pinKeys, pins = append(pinKeys, instance), append(pins, nil)
		}
		enqueues = append(enqueues, c.enqueues...)
		cancelKeys = append(cancelKeys, c.cancelKeys...)
	}
	if len(pinKeys) > 0 {
		if err := tx.q.SetKeyAttrs(ctx, p.orchQ, pinKeys, pins); err != nil {
			return err
		}
	}
	if err := tx.q.Enqueue(ctx, enqueues...); err != nil {
		return err
	}
	// Cancellations after the inserts: an activity scheduled and cancelled in the
	// same turn must not survive.
	if len(cancelKeys) > 0 {
		if _, err := tx.q.Remove(ctx, p.workQ, cancelKeys...); err != nil {
			return err
		}
	}
	return nil
}

// deltaSideEffects extracts the KV mutations (in order) and the last custom status
// change (nil: none; a nil inner value: cleared) of a history delta.
func deltaSideEffects(delta []provider.Event) (kv []eventstore.KVMutation, customStatus **string) {
	for i := range delta {
		e := &delta[i]
		at := time.UnixMilli(e.TimestampMs)
		switch e.Kind {
		case provider.EventKeyValueSet:
			if e.LastUpdatedAtMs != 0 {
				at = time.UnixMilli(e.LastUpdatedAtMs)
			}
			kv = append(kv, eventstore.KVMutation{Op: eventstore.KVSet, Key: e.Key, Value: e.Value, At: at})
		case provider.EventKeyValueCleared:
			kv = append(kv, eventstore.KVMutation{Op: eventstore.KVClear, Key: e.Key, At: at})
		case provider.EventKeyValuesCleared:
			kv = append(kv, eventstore.KVMutation{Op: eventstore.KVClearAll, At: at})
		case provider.EventCustomStatusUpdated:
			status := e.Status
			customStatus = &status
		}
	}
	return kv, customStatus
}

// AbandonOrchestrationItem implements provider.Provider.
func (p *Provider) AbandonOrchestrationItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	return p.AbandonOrchestrationItemWithReason(ctx, token, delay, ignoreAttempt, "")
}

// RenewOrchestrationItemLock implements provider.Provider.
func (p *Provider) RenewOrchestrationItemLock(ctx context.Context, token string, extend time.Duration) error {
	_, err := p.q.Renew(ctx, token, extend)
	return p.wrote("renew_orchestration_item_lock", err)
}

// EnqueueForOrchestrator implements provider.Provider. The delay, not a timer's fire
// time, sets the visibility on this path.
func (p *Provider) EnqueueForOrchestrator(ctx context.Context, item provider.WorkItem, delay time.Duration) error {
	const op = "enqueue_for_orchestrator"
	m, err := p.orchMessage(&item, delay)
	if err != nil {
		return classify(op, err)
	}
	return p.enqueued(op, p.q.Enqueue(ctx, m))
}
