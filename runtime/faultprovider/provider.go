package faultprovider

import (
	"context"
	"time"

	"github.com/duroq/duroq/runtime"
)

// provider is the faulty runtime.Provider; withCapabilities adds the optional
// interfaces of the wrapped one.
type provider struct {
	f *Injector
	p runtime.Provider
}

// write runs a write op through the faults: it may fail before call or lose the
// reply of a call that succeeded.
func (w *provider) write(op Op, call func() error) error {
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
func read[T any](w *provider, op Op, call func() (T, error)) (T, error) {
	if w.f.decide(op) != none {
		var zero T
		return zero, w.f.failed(op)
	}
	return call()
}

func (w *provider) FetchOrchestrationItem(ctx context.Context, opts runtime.FetchOptions) (*runtime.OrchestrationItem, error) {
	return read(w, OpFetchOrchestrationItem, func() (*runtime.OrchestrationItem, error) {
		return w.p.FetchOrchestrationItem(ctx, opts)
	})
}

func (w *provider) AckOrchestrationItem(ctx context.Context, token string, ack runtime.OrchestrationAck) error {
	return w.write(OpAckOrchestrationItem, func() error { return w.p.AckOrchestrationItem(ctx, token, ack) })
}

func (w *provider) AbandonOrchestrationItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	return w.write(OpAbandonOrchestrationItem, func() error {
		return w.p.AbandonOrchestrationItem(ctx, token, delay, ignoreAttempt)
	})
}

func (w *provider) RenewOrchestrationItemLock(ctx context.Context, token string, extend time.Duration) error {
	return w.write(OpRenewOrchestrationItemLock, func() error { return w.p.RenewOrchestrationItemLock(ctx, token, extend) })
}

func (w *provider) FetchWorkItem(ctx context.Context, opts runtime.WorkFetchOptions) (*runtime.WorkItemLease, error) {
	return read(w, OpFetchWorkItem, func() (*runtime.WorkItemLease, error) { return w.p.FetchWorkItem(ctx, opts) })
}

func (w *provider) AckWorkItem(ctx context.Context, token string, completion *runtime.WorkItem) error {
	return w.write(OpAckWorkItem, func() error { return w.p.AckWorkItem(ctx, token, completion) })
}

func (w *provider) AbandonWorkItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	return w.write(OpAbandonWorkItem, func() error { return w.p.AbandonWorkItem(ctx, token, delay, ignoreAttempt) })
}

func (w *provider) RenewWorkItemLock(ctx context.Context, token string, extend time.Duration) error {
	return w.write(OpRenewWorkItemLock, func() error { return w.p.RenewWorkItemLock(ctx, token, extend) })
}

func (w *provider) RenewSessionLock(ctx context.Context, owners []string, extend, idleTimeout time.Duration) (int, error) {
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

func (w *provider) CleanupOrphanedSessions(ctx context.Context, idleTimeout time.Duration) (int, error) {
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

func (w *provider) EnqueueForOrchestrator(ctx context.Context, item runtime.WorkItem, delay time.Duration) error {
	return w.write(OpEnqueueForOrchestrator, func() error { return w.p.EnqueueForOrchestrator(ctx, item, delay) })
}

func (w *provider) EnqueueForWorker(ctx context.Context, item runtime.WorkItem) error {
	return w.write(OpEnqueueForWorker, func() error { return w.p.EnqueueForWorker(ctx, item) })
}

func (w *provider) Read(ctx context.Context, instance string) ([]runtime.Event, error) {
	return read(w, OpRead, func() ([]runtime.Event, error) { return w.p.Read(ctx, instance) })
}

func (w *provider) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]runtime.Event, error) {
	return read(w, OpReadWithExecution, func() ([]runtime.Event, error) {
		return w.p.ReadWithExecution(ctx, instance, executionID)
	})
}

func (w *provider) AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []runtime.Event) error {
	return w.write(OpAppendWithExecution, func() error {
		return w.p.AppendWithExecution(ctx, instance, executionID, events)
	})
}

func (w *provider) GetCustomStatus(ctx context.Context, instance string, lastSeen uint64) (*string, uint64, bool, error) {
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

func (w *provider) GetKVValue(ctx context.Context, instance, key string) (string, bool, error) {
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

func (w *provider) GetKVAllValues(ctx context.Context, instance string) (map[string]string, error) {
	return read(w, OpGetKVAllValues, func() (map[string]string, error) { return w.p.GetKVAllValues(ctx, instance) })
}

func (w *provider) GetInstanceStats(ctx context.Context, instance string) (*runtime.SystemStats, error) {
	return read(w, OpGetInstanceStats, func() (*runtime.SystemStats, error) { return w.p.GetInstanceStats(ctx, instance) })
}

// Close closes the wrapped provider; it is never faulted.
func (w *provider) Close() error { return w.p.Close() }

// batch adds runtime.BatchProvider.
type batch struct {
	w  *provider
	bp runtime.BatchProvider
}

func (b batch) FetchOrchestrationItems(ctx context.Context, opts runtime.FetchOptions, limit int) ([]*runtime.OrchestrationItem, error) {
	return read(b.w, OpFetchOrchestrationItems, func() ([]*runtime.OrchestrationItem, error) {
		return b.bp.FetchOrchestrationItems(ctx, opts, limit)
	})
}

func (b batch) AckOrchestrationItems(ctx context.Context, acks []runtime.TurnAck) error {
	return b.w.write(OpAckOrchestrationItems, func() error { return b.bp.AckOrchestrationItems(ctx, acks) })
}

func (b batch) FetchWorkItems(ctx context.Context, opts runtime.WorkFetchOptions, limit int) ([]*runtime.WorkItemLease, error) {
	return read(b.w, OpFetchWorkItems, func() ([]*runtime.WorkItemLease, error) {
		return b.bp.FetchWorkItems(ctx, opts, limit)
	})
}

func (b batch) AckWorkItems(ctx context.Context, acks []runtime.WorkAck) error {
	return b.w.write(OpAckWorkItems, func() error { return b.bp.AckWorkItems(ctx, acks) })
}

// managed adds runtime.ManagedProvider; management calls are not faulted.
type managed struct{ mp runtime.ManagedProvider }

func (m managed) Management() runtime.ProviderAdmin { return m.mp.Management() }

// PendingStart implements runtime.PendingStartReader for every wrapped provider: one
// without it shows no start, so clients read NotFound as they would without the
// wrapper.
func (w *provider) PendingStart(ctx context.Context, instance string) (*runtime.PendingStart, error) {
	return read(w, OpPendingStart, func() (*runtime.PendingStart, error) {
		if pr, ok := w.p.(runtime.PendingStartReader); ok {
			return pr.PendingStart(ctx, instance)
		}
		return nil, nil
	})
}

// AbandonOrchestrationItemWithReason implements runtime.ReasonAbandoner for every
// wrapped provider, faulted as OpAbandonOrchestrationItem: one without it abandons
// without keeping the reason, as the runtime does then.
func (w *provider) AbandonOrchestrationItemWithReason(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool, reason string) error {
	return w.write(OpAbandonOrchestrationItem, func() error {
		if ra, ok := w.p.(runtime.ReasonAbandoner); ok {
			return ra.AbandonOrchestrationItemWithReason(ctx, token, delay, ignoreAttempt, reason)
		}
		return w.p.AbandonOrchestrationItem(ctx, token, delay, ignoreAttempt)
	})
}

// Changed implements runtime.ChangeNotifier for every wrapped provider, never
// faulted: nil (no notice) when the wrapped provider has none.
func (w *provider) Changed() <-chan struct{} {
	if c, ok := w.p.(runtime.ChangeNotifier); ok {
		return c.Changed()
	}
	return nil
}

// withCapabilities returns w with the batch and management interfaces of its
// wrapped provider, which the runtime and clients type-assert: one type per
// combination, since Go cannot add methods to a value at run time.
func withCapabilities(w *provider) runtime.Provider {
	bp, isB := w.p.(runtime.BatchProvider)
	mp, isM := w.p.(runtime.ManagedProvider)
	b, m := batch{w, bp}, managed{mp}
	switch {
	case isB && isM:
		return struct {
			*provider
			batch
			managed
		}{w, b, m}
	case isB:
		return struct {
			*provider
			batch
		}{w, b}
	case isM:
		return struct {
			*provider
			managed
		}{w, m}
	}
	return w
}
