package adapter

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/runtime/provider"
)

// Read implements provider.Provider.
func (p *Provider) Read(ctx context.Context, instance string) ([]provider.Event, error) {
	const op = "read"
	_, stored, err := p.s.ReadLatest(ctx, instance)
	if errors.Is(err, eventstore.ErrNotFound) {
		return []provider.Event{}, nil
	}
	return p.decode(op, instance, stored, err)
}

// ReadWithExecution implements provider.Provider.
func (p *Provider) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]provider.Event, error) {
	stored, err := p.s.Read(ctx, instance, int64(executionID))
	return p.decode("read_with_execution", instance, stored, err)
}

// decode turns stored events into runtime events; undecodable rows are a permanent
// error, never skipped.
func (p *Provider) decode(op, instance string, stored []eventstore.Event, err error) ([]provider.Event, error) {
	if err != nil {
		return nil, classify(op, fmt.Errorf("instance %q: %w", instance, err))
	}
	events, err := fromStored(stored)
	if err != nil {
		return nil, classify(op, fmt.Errorf("instance %q: %w", instance, err))
	}
	return events, nil
}

// AppendWithExecution implements provider.Provider.
func (p *Provider) AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []provider.Event) error {
	const op = "append_with_execution"
	stored, err := toStored(events)
	if err != nil {
		return classify(op, err)
	}
	return classify(op, p.s.Append(ctx, instance, int64(executionID), stored))
}

// GetCustomStatus implements provider.Provider.
func (p *Provider) GetCustomStatus(ctx context.Context, instance string, lastSeen uint64) (*string, uint64, bool, error) {
	cs, changed, err := p.s.CustomStatus(ctx, instance, int64(lastSeen))
	if errors.Is(err, eventstore.ErrNotFound) || (err == nil && !changed) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, classify("get_custom_status", err)
	}
	return cs.Value, uint64(cs.Version), true, nil
}

// GetKVValue implements provider.Provider.
func (p *Provider) GetKVValue(ctx context.Context, instance, key string) (string, bool, error) {
	e, ok, err := p.s.KVGet(ctx, instance, key)
	if errors.Is(err, eventstore.ErrNotFound) {
		return "", false, nil
	}
	return e.Value, ok, classify("get_kv_value", err)
}

// GetKVAllValues implements provider.Provider.
func (p *Provider) GetKVAllValues(ctx context.Context, instance string) (map[string]string, error) {
	entries, err := p.s.KVAll(ctx, instance)
	if errors.Is(err, eventstore.ErrNotFound) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, classify("get_kv_all_values", err)
	}
	out := make(map[string]string, len(entries))
	for k, e := range entries {
		out[k] = e.Value
	}
	return out, nil
}

// GetInstanceStats implements provider.Provider.
func (p *Provider) GetInstanceStats(ctx context.Context, instance string) (*provider.SystemStats, error) {
	const op = "get_instance_stats"
	st, err := p.s.Stats(ctx, instance)
	if errors.Is(err, eventstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, classify(op, err)
	}
	// Pending queue messages are those carried into the current execution by its
	// OrchestrationStarted event and not yet consumed by a replay.
	history, err := p.Read(ctx, instance)
	if err != nil {
		return nil, err
	}
	var pending int
	if len(history) > 0 && history[0].Kind == provider.EventOrchestrationStarted {
		pending = len(history[0].CarryForward)
	}
	return &provider.SystemStats{HistoryEventCount: uint64(st.Events), HistorySizeBytes: uint64(st.EventBytes),
		QueuePendingCount: uint64(pending), KVUserKeyCount: uint64(st.KVKeys),
		KVTotalValueBytes: uint64(st.KVValueBytes)}, nil
}

// ---- management (provider.ProviderAdmin) ----

// ListInstances implements provider.ProviderAdmin.
func (p *Provider) ListInstances(ctx context.Context) ([]string, error) {
	ids, err := p.s.ListStreams(ctx, eventstore.StreamFilter{})
	return ids, classify("list_instances", err)
}

// ListInstancesByStatus implements provider.ProviderAdmin.
func (p *Provider) ListInstancesByStatus(ctx context.Context, status string) ([]string, error) {
	ids, err := p.s.ListStreams(ctx, eventstore.StreamFilter{Status: eventstore.Status(status)})
	return ids, classify("list_instances_by_status", err)
}

// ListInstancePage implements provider.ProviderAdmin: one page of the event store's
// id-ordered listing of stream metadata, read at once (one more is asked for, to
// know whether a page follows).
func (p *Provider) ListInstancePage(ctx context.Context, q provider.InstanceQuery) (provider.InstancePage, error) {
	const op = "list_instance_page"
	if q.Limit < 0 {
		return provider.InstancePage{}, provider.Permanent(op, fmt.Errorf("%w: negative Limit %d", provider.ErrInvalid, q.Limit))
	}
	limit := q.Limit
	if limit == 0 {
		limit = provider.DefaultPageSize
	}
	limit = min(limit, provider.MaxPageSize)
	infos, err := p.s.ListStreamInfos(ctx, eventstore.StreamFilter{Status: eventstore.Status(q.Status), Name: q.Orchestration,
		IDPrefix: q.IDPrefix, Parent: q.Parent, RootsOnly: q.RootsOnly, CreatedAfter: q.CreatedAfter, CreatedBefore: q.CreatedBefore,
		UpdatedAfter: q.UpdatedAfter, UpdatedBefore: q.UpdatedBefore, After: q.After, Limit: limit + 1})
	if err != nil {
		return provider.InstancePage{}, classify(op, err)
	}
	var page provider.InstancePage
	if len(infos) > limit {
		infos = infos[:limit]
		page.Next = infos[limit-1].Stream
	}
	page.Instances = make([]provider.InstanceInfo, len(infos))
	for i, info := range infos {
		page.Instances[i] = instanceInfo(info)
	}
	return page, nil
}

// ListExecutions implements provider.ProviderAdmin.
func (p *Provider) ListExecutions(ctx context.Context, instance string) ([]uint64, error) {
	parts, err := p.s.Partitions(ctx, instance)
	if errors.Is(err, eventstore.ErrNotFound) {
		return []uint64{}, nil
	}
	if err != nil {
		return nil, classify("list_executions", err)
	}
	ids := make([]uint64, len(parts))
	for i, pi := range parts {
		ids[i] = uint64(pi.Partition)
	}
	return ids, nil
}

// ReadHistoryWithExecutionID implements provider.ProviderAdmin.
func (p *Provider) ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]provider.Event, error) {
	return p.ReadWithExecution(ctx, instance, executionID)
}

// ReadHistory implements provider.ProviderAdmin.
func (p *Provider) ReadHistory(ctx context.Context, instance string) ([]provider.Event, error) {
	return p.Read(ctx, instance)
}

// LatestExecutionID implements provider.ProviderAdmin.
func (p *Provider) LatestExecutionID(ctx context.Context, instance string) (uint64, error) {
	n, err := p.s.LatestPartition(ctx, instance)
	return uint64(n), classify("latest_execution_id", err)
}

// GetInstanceInfo implements provider.ProviderAdmin.
func (p *Provider) GetInstanceInfo(ctx context.Context, instance string) (provider.InstanceInfo, error) {
	info, err := p.s.Stream(ctx, instance)
	if err != nil {
		return provider.InstanceInfo{}, classify("get_instance_info", fmt.Errorf("instance %q: %w", instance, err))
	}
	return instanceInfo(info), nil
}

func instanceInfo(info eventstore.StreamInfo) provider.InstanceInfo {
	return provider.InstanceInfo{InstanceID: info.Stream, OrchestrationName: info.Name, OrchestrationVersion: info.Version,
		CurrentExecutionID: uint64(info.CurrentPartition), Status: string(info.Status), Output: info.Output,
		ParentInstanceID: info.Parent, CreatedAt: info.CreatedAt, UpdatedAt: info.UpdatedAt}
}

// GetExecutionInfo implements provider.ProviderAdmin.
func (p *Provider) GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (provider.ExecutionInfo, error) {
	const op = "get_execution_info"
	parts, err := p.s.Partitions(ctx, instance)
	if err != nil {
		return provider.ExecutionInfo{}, classify(op, fmt.Errorf("instance %q: %w", instance, err))
	}
	for _, pi := range parts {
		if uint64(pi.Partition) == executionID {
			return provider.ExecutionInfo{ExecutionID: executionID, Status: string(pi.Status), Output: pi.Output,
				StartedAt: pi.StartedAt, CompletedAt: pi.CompletedAt, EventCount: uint64(pi.Events)}, nil
		}
	}
	return provider.ExecutionInfo{}, classify(op, fmt.Errorf("%w: instance %q has no execution %d", provider.ErrNotFound, instance, executionID))
}

// GetSystemMetrics implements provider.ProviderAdmin.
func (p *Provider) GetSystemMetrics(ctx context.Context) (provider.SystemMetrics, error) {
	t, err := p.s.Totals(ctx)
	if err != nil {
		return provider.SystemMetrics{}, classify("get_system_metrics", err)
	}
	return provider.SystemMetrics{TotalInstances: uint64(t.Streams), TotalExecutions: uint64(t.Partitions),
		RunningInstances: uint64(t.ByStatus[eventstore.StatusRunning]), CompletedInstances: uint64(t.ByStatus[eventstore.StatusCompleted]),
		FailedInstances: uint64(t.ByStatus[eventstore.StatusFailed]), TotalEvents: uint64(t.Events)}, nil
}

// GetQueueDepths implements provider.ProviderAdmin: pending (unacked) messages per
// queue; timers are the orchestrator messages that are not visible yet.
func (p *Provider) GetQueueDepths(ctx context.Context) (provider.QueueDepths, error) {
	const op = "get_queue_depths"
	o, err := p.q.Stats(ctx, p.orchQ)
	if err != nil {
		return provider.QueueDepths{}, classify(op, err)
	}
	w, err := p.q.Stats(ctx, p.workQ)
	if err != nil {
		return provider.QueueDepths{}, classify(op, err)
	}
	return provider.QueueDepths{OrchestratorQueue: uint64(o.Ready + o.Locked + o.Delayed),
		WorkerQueue: uint64(w.Ready + w.Locked + w.Delayed), TimerQueue: uint64(o.Delayed),
		OrchestratorOldestReady: o.OldestReady, WorkerOldestReady: w.OldestReady}, nil
}

// ListChildren implements provider.ProviderAdmin (an unknown instance has none).
func (p *Provider) ListChildren(ctx context.Context, instance string) ([]string, error) {
	ids, err := p.s.ListStreams(ctx, eventstore.StreamFilter{Parent: instance})
	return ids, classify("list_children", err)
}

// GetParentID implements provider.ProviderAdmin.
func (p *Provider) GetParentID(ctx context.Context, instance string) (string, error) {
	info, err := p.s.Stream(ctx, instance)
	if err != nil {
		return "", classify("get_parent_id", fmt.Errorf("instance %q: %w", instance, err))
	}
	return info.Parent, nil
}

// GetInstanceTree implements provider.ProviderAdmin.
func (p *Provider) GetInstanceTree(ctx context.Context, instance string) (provider.InstanceTree, error) {
	tree := provider.InstanceTree{RootID: instance}
	for queue := []string{instance}; len(queue) > 0; {
		id := queue[0]
		queue = queue[1:]
		tree.AllIDs = append(tree.AllIDs, id)
		children, err := p.ListChildren(ctx, id)
		if err != nil {
			return provider.InstanceTree{}, err
		}
		queue = append(queue, children...)
	}
	return tree, nil
}

// purgeQueues deletes the queue messages of deleted instances inside tx and counts them.
func (p *Provider) purgeQueues(ctx context.Context, tx turnTx, ids []string) (uint64, error) {
	var n uint64
	for _, id := range ids {
		o, err := tx.q.PurgeKey(ctx, p.orchQ, id)
		if err != nil {
			return 0, err
		}
		w, err := tx.q.RemovePrefix(ctx, p.workQ, instancePrefix(id))
		if err != nil {
			return 0, err
		}
		n += uint64(o + w)
	}
	return n, nil
}

func deleteResult(r eventstore.DeleteResult, queued uint64) provider.DeleteInstanceResult {
	return provider.DeleteInstanceResult{InstancesDeleted: uint64(r.Streams), ExecutionsDeleted: uint64(r.Partitions),
		EventsDeleted: uint64(r.Events), QueueMessagesDeleted: queued}
}

// DeleteInstance implements provider.ProviderAdmin.
func (p *Provider) DeleteInstance(ctx context.Context, instance string, force bool) (provider.DeleteInstanceResult, error) {
	return p.deleteIDs(ctx, "delete_instance", []string{instance}, eventstore.DeleteOptions{Force: force})
}

// DeleteInstancesAtomic implements provider.ProviderAdmin.
func (p *Provider) DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (provider.DeleteInstanceResult, error) {
	if len(ids) == 0 {
		return provider.DeleteInstanceResult{}, nil
	}
	return p.deleteIDs(ctx, "delete_instances_atomic", ids, eventstore.DeleteOptions{Force: force, AllowNonRoot: true})
}

func (p *Provider) deleteIDs(ctx context.Context, op string, ids []string, o eventstore.DeleteOptions) (provider.DeleteInstanceResult, error) {
	var res provider.DeleteInstanceResult
	err := p.b.run(ctx, func(tx turnTx) error {
		if o.AllowNonRoot {
			// Exactly ids: a child outside the set would be orphaned (it may have been
			// started after the caller listed the tree).
			for _, id := range ids {
				children, err := tx.s.ListStreams(ctx, eventstore.StreamFilter{Parent: id})
				if err != nil {
					return err
				}
				for _, c := range children {
					if !slices.Contains(ids, c) {
						return fmt.Errorf("%w: deleting %q would orphan its child %q, which is not in the set", provider.ErrInvalid, id, c)
					}
				}
			}
		}
		r, err := tx.s.Delete(ctx, ids, o)
		if err != nil {
			return err
		}
		queued, err := p.purgeQueues(ctx, tx, r.StreamIDs)
		res = deleteResult(r, queued)
		return err
	})
	return res, classify(op, err)
}

// DeleteInstanceBulk implements provider.ProviderAdmin.
func (p *Provider) DeleteInstanceBulk(ctx context.Context, f provider.InstanceFilter) (provider.DeleteInstanceResult, error) {
	var res provider.DeleteInstanceResult
	err := p.b.run(ctx, func(tx turnTx) error {
		r, err := tx.s.DeleteWhere(ctx, streamFilter(f))
		if err != nil {
			return err
		}
		queued, err := p.purgeQueues(ctx, tx, r.StreamIDs)
		res = deleteResult(r, queued)
		return err
	})
	return res, classify("delete_instance_bulk", err)
}

func streamFilter(f provider.InstanceFilter) eventstore.StreamFilter {
	sf := eventstore.StreamFilter{CompletedBefore: f.CompletedBefore, Limit: f.Limit}
	if f.InstanceIDs != nil {
		sf.Streams = f.InstanceIDs
	}
	return sf
}

// PruneExecutions implements provider.ProviderAdmin.
func (p *Provider) PruneExecutions(ctx context.Context, instance string, o provider.PruneOptions) (provider.PruneResult, error) {
	var res provider.PruneResult
	err := p.b.run(ctx, func(tx turnTx) error {
		r, err := tx.s.Prune(ctx, instance, eventstore.PruneOptions{KeepLast: o.KeepLast, CompletedBefore: o.CompletedBefore})
		res = provider.PruneResult{InstancesProcessed: uint64(r.Streams), ExecutionsDeleted: uint64(r.Partitions), EventsDeleted: uint64(r.Events)}
		return err
	})
	return res, classify("prune_executions", err)
}

// PruneExecutionsBulk implements provider.ProviderAdmin.
func (p *Provider) PruneExecutionsBulk(ctx context.Context, f provider.InstanceFilter, o provider.PruneOptions) (provider.PruneResult, error) {
	var res provider.PruneResult
	err := p.b.run(ctx, func(tx turnTx) error {
		r, err := tx.s.PruneWhere(ctx, streamFilter(f), eventstore.PruneOptions{KeepLast: o.KeepLast, CompletedBefore: o.CompletedBefore})
		res = provider.PruneResult{InstancesProcessed: uint64(r.Streams), ExecutionsDeleted: uint64(r.Partitions), EventsDeleted: uint64(r.Events)}
		return err
	})
	return res, classify("prune_executions_bulk", err)
}
