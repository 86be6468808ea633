package faultprovider

import (
	"context"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

// provider is the faulty provider.Provider; withCapabilities adds the optional
// interfaces of the wrapped one.
type faulty struct {
	f *Injector
	p provider.Provider
}

// write runs a write op through the faults: it may fail before call or lose the
// reply of a call that succeeded.
func (w *faulty) write(op Op, call func() error) error {
	switch w.f.decide(op) {
	case failBefore:
		return w.f.failed(op)
	case loseReply:
		if err := call(); err != nil {
			return err
		}
		return w.f.lostReply(op)
	}
	return call()
}

// read runs a read op through the faults: it may fail before call.
func read[T any](w *faulty, op Op, call func() (T, error)) (T, error) {
	if w.f.decide(op) != none {
		var zero T
		return zero, w.f.failed(op)
	}
	return call()
}

func (w *faulty) FetchOrchestrationItem(ctx context.Context, opts provider.FetchOptions) (*provider.OrchestrationItem, error) {
	return read(w, OpFetchOrchestrationItem, func() (*provider.OrchestrationItem, error) {
		return w.p.FetchOrchestrationItem(ctx, opts)
	})
}

func (w *faulty) AckOrchestrationItem(ctx context.Context, token string, ack provider.OrchestrationAck) error {
	return w.write(OpAckOrchestrationItem, func() error { return w.p.AckOrchestrationItem(ctx, token, ack) })
}

func (w *faulty) AbandonOrchestrationItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	return w.write(OpAbandonOrchestrationItem, func() error {
		return w.p.AbandonOrchestrationItem(ctx, token, delay, ignoreAttempt)
	})
}

func (w *faulty) RenewOrchestrationItemLock(ctx context.Context, token string, extend time.Duration) error {
	return w.write(OpRenewOrchestrationItemLock, func() error { return w.p.RenewOrchestrationItemLock(ctx, token, extend) })
}

func (w *faulty) FetchWorkItem(ctx context.Context, opts provider.WorkFetchOptions) (*provider.WorkItemLease, error) {
	return read(w, OpFetchWorkItem, func() (*provider.WorkItemLease, error) { return w.p.FetchWorkItem(ctx, opts) })
}

func (w *faulty) AckWorkItem(ctx context.Context, token string, completion *provider.WorkItem) error {
	return w.write(OpAckWorkItem, func() error { return w.p.AckWorkItem(ctx, token, completion) })
}

func (w *faulty) AbandonWorkItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	return w.write(OpAbandonWorkItem, func() error { return w.p.AbandonWorkItem(ctx, token, delay, ignoreAttempt) })
}

func (w *faulty) RenewWorkItemLock(ctx context.Context, token string, extend time.Duration) error {
	return w.write(OpRenewWorkItemLock, func() error { return w.p.RenewWorkItemLock(ctx, token, extend) })
}

func (w *faulty) RenewSessionLock(ctx context.Context, owners []string, extend, idleTimeout time.Duration) (int, error) {
	var n int
	err := w.write(OpRenewSessionLock, func() (err error) {
		n, err = w.p.RenewSessionLock(ctx, owners, extend, idleTimeout)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

func (w *faulty) CleanupOrphanedSessions(ctx context.Context, idleTimeout time.Duration) (int, error) {
	var n int
	err := w.write(OpCleanupOrphanedSessions, func() (err error) {
		n, err = w.p.CleanupOrphanedSessions(ctx, idleTimeout)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

func (w *faulty) EnqueueForOrchestrator(ctx context.Context, item provider.WorkItem, delay time.Duration) error {
	return w.write(OpEnqueueForOrchestrator, func() error { return w.p.EnqueueForOrchestrator(ctx, item, delay) })
}

func (w *faulty) EnqueueForWorker(ctx context.Context, item provider.WorkItem) error {
	return w.write(OpEnqueueForWorker, func() error { return w.p.EnqueueForWorker(ctx, item) })
}

func (w *faulty) Read(ctx context.Context, instance string) ([]provider.Event, error) {
	return read(w, OpRead, func() ([]provider.Event, error) { return w.p.Read(ctx, instance) })
}

func (w *faulty) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]provider.Event, error) {
	return read(w, OpReadWithExecution, func() ([]provider.Event, error) {
		return w.p.ReadWithExecution(ctx, instance, executionID)
	})
}

func (w *faulty) AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []provider.Event) error {
	return w.write(OpAppendWithExecution, func() error {
		return w.p.AppendWithExecution(ctx, instance, executionID, events)
	})
}

func (w *faulty) GetCustomStatus(ctx context.Context, instance string, lastSeen uint64) (*string, uint64, bool, error) {
	type result struct {
		status  *string
		version uint64
		changed bool
	}
	r, err := read(w, OpGetCustomStatus, func() (r result, err error) {
		r.status, r.version, r.changed, err = w.p.GetCustomStatus(ctx, instance, lastSeen)
		return r, err
	})
	return r.status, r.version, r.changed, err
}

func (w *faulty) GetKVValue(ctx context.Context, instance, key string) (string, bool, error) {
	type result struct {
		value string
		ok    bool
	}
	r, err := read(w, OpGetKVValue, func() (r result, err error) {
		r.value, r.ok, err = w.p.GetKVValue(ctx, instance, key)
		return r, err
	})
	return r.value, r.ok, err
}

func (w *faulty) GetKVAllValues(ctx context.Context, instance string) (map[string]string, error) {
	return read(w, OpGetKVAllValues, func() (map[string]string, error) { return w.p.GetKVAllValues(ctx, instance) })
}

func (w *faulty) GetInstanceStats(ctx context.Context, instance string) (*provider.SystemStats, error) {
	return read(w, OpGetInstanceStats, func() (*provider.SystemStats, error) { return w.p.GetInstanceStats(ctx, instance) })
}

// Close closes the wrapped provider; it is never faulted.
func (w *faulty) Close() error { return w.p.Close() }

// batch adds provider.BatchProvider.
type batch struct {
	w  *faulty
	bp provider.BatchProvider
}

func (b batch) FetchOrchestrationItems(ctx context.Context, opts provider.FetchOptions, limit int) ([]*provider.OrchestrationItem, error) {
	return read(b.w, OpFetchOrchestrationItems, func() ([]*provider.OrchestrationItem, error) {
		return b.bp.FetchOrchestrationItems(ctx, opts, limit)
	})
}

func (b batch) AckOrchestrationItems(ctx context.Context, acks []provider.TurnAck) error {
	return b.w.write(OpAckOrchestrationItems, func() error { return b.bp.AckOrchestrationItems(ctx, acks) })
}

func (b batch) FetchWorkItems(ctx context.Context, opts provider.WorkFetchOptions, limit int) ([]*provider.WorkItemLease, error) {
	return read(b.w, OpFetchWorkItems, func() ([]*provider.WorkItemLease, error) {
		return b.bp.FetchWorkItems(ctx, opts, limit)
	})
}

func (b batch) AckWorkItems(ctx context.Context, acks []provider.WorkAck) error {
	return b.w.write(OpAckWorkItems, func() error { return b.bp.AckWorkItems(ctx, acks) })
}

// managed adds provider.ManagedProvider; management calls are not faulted.
type managed struct{ mp provider.ManagedProvider }

func (m managed) Management() provider.ProviderAdmin { return m.mp.Management() }

// PendingStart implements provider.PendingStartReader for every wrapped provider: one
// without it shows no start, so clients read NotFound as they would without the
// wrapper.
func (w *faulty) PendingStart(ctx context.Context, instance string) (*provider.PendingStart, error) {
	return read(w, OpPendingStart, func() (*provider.PendingStart, error) {
		if pr, ok := w.p.(provider.PendingStartReader); ok {
			return pr.PendingStart(ctx, instance)
		}
		return nil, nil
	})
}

// AbandonOrchestrationItemWithReason implements provider.ReasonAbandoner for every
// wrapped provider, faulted as OpAbandonOrchestrationItem: one without it abandons
// without keeping the reason, as the runtime does then.
func (w *faulty) AbandonOrchestrationItemWithReason(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool, reason string) error {
	return w.write(OpAbandonOrchestrationItem, func() error {
		if ra, ok := w.p.(provider.ReasonAbandoner); ok {
			return ra.AbandonOrchestrationItemWithReason(ctx, token, delay, ignoreAttempt, reason)
		}
		return w.p.AbandonOrchestrationItem(ctx, token, delay, ignoreAttempt)
	})
}

// Changed implements provider.ChangeNotifier for every wrapped provider, never
// faulted: nil (no notice) when the wrapped provider has none.
func (w *faulty) Changed() <-chan struct{} {
	if c, ok := w.p.(provider.ChangeNotifier); ok {
		return c.Changed()
	}
	return nil
}

// WatchInstance implements provider.InstanceWatcher for every wrapped provider,
// never faulted: a nil channel (no notice) when the wrapped provider has none.
func (w *faulty) WatchInstance(ctx context.Context, instance string) (<-chan struct{}, func()) {
	if iw, ok := w.p.(provider.InstanceWatcher); ok {
		return iw.WatchInstance(ctx, instance)
	}
	return nil, func() {}
}

// withCapabilities returns w with the batch and management interfaces of its
// wrapped provider, which the runtime and clients type-assert: one type per
// combination, since Go cannot add methods to a value at run time.
func withCapabilities(w *faulty) provider.Provider {
	bp, isB := w.p.(provider.BatchProvider)
	mp, isM := w.p.(provider.ManagedProvider)
	b, m := batch{w, bp}, managed{mp}
	switch {
	case isB && isM:
		return struct {
			*faulty
			batch
			managed
		}{w, b, m}
	case isB:
		return struct {
			*faulty
			batch
		}{w, b}
	case isM:
		return struct {
			*faulty
			managed
		}{w, m}
	}
	return w
}
