package runtime

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/duroq/duroq/runtime/provider"
)

// Metric attributes besides the span attributes they share.
const (
	attrResumed    = attribute.Key("duroq.turn.resumed")
	attrPoisonType = attribute.Key("duroq.poison.type")
	attrWork       = attribute.Key("duroq.work")
	attrQueue      = attribute.Key("duroq.queue")
)

// metrics are the runtime's instruments (see Options.MeterProvider for their
// names and meaning). A nil *metrics, the runtime's without a MeterProvider,
// records nothing and costs nothing.
type metrics struct {
	meter                     metric.Meter
	turn, activity, execution metric.Float64Histogram
	poison, lockLost          metric.Int64Counter
	depth                     metric.Int64ObservableGauge
	age                       metric.Float64ObservableGauge
}

// newMetrics creates the instruments on mp's meter (nil for a nil mp). An SDK that
// refuses one (an invalid view, say) gets a no-op in its place: metrics never stop
// the runtime.
func newMetrics(mp metric.MeterProvider) *metrics {
	if mp == nil {
		return nil
	}
	m := &metrics{meter: mp.Meter(tracerName)}
	seconds := metric.WithUnit("s")
	// Buckets for what takes microseconds to a minute (a turn, an activity), and
	// for executions, which may last days. The SDK's defaults (0, 5, 10, ... s) put
	// nearly every turn in the first bucket.
	short := metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
	long := metric.WithExplicitBucketBoundaries(0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 4*3600, 24*3600, 7*24*3600)
	m.turn, _ = m.meter.Float64Histogram("duroq.turn.duration", seconds, short,
		metric.WithDescription("Time an orchestration turn's code ran (replay included), by orchestration, resulting status and whether it resumed cached state"))
	m.activity, _ = m.meter.Float64Histogram("duroq.activity.duration", seconds, short,
		metric.WithDescription("Time an activity execution ran, by activity and outcome"))
	m.execution, _ = m.meter.Float64Histogram("duroq.execution.duration", seconds, long,
		metric.WithDescription("Time from an execution's first turn to the turn that ended it, by orchestration and final status"))
	m.poison, _ = m.meter.Int64Counter("duroq.poison", metric.WithDescription("Work given up after MaxAttempts, by type (orchestration, activity)"))
	m.lockLost, _ = m.meter.Int64Counter("duroq.lock.lost", metric.WithDescription("Locks lost while their work ran, by work (orchestration, activity)"))
	m.depth, _ = m.meter.Int64ObservableGauge("duroq.queue.depth",
		metric.WithDescription("Messages pending in the runtime's queues (orchestrator, worker, timer: delayed orchestrator messages)"))
	m.age, _ = m.meter.Float64ObservableGauge("duroq.queue.oldest_ready.age", seconds,
		metric.WithDescription("How long the ready message of each runtime queue (orchestrator, worker) that has waited longest has been visible; 0 when none is ready"))
	return m
}

// observeDepths reports p's queue depths at each collection, when p has a
// management API; the returned function stops it.
func (m *metrics) observeDepths(p provider.Provider, log *slog.Logger) func() {
	mp, ok := p.(provider.ManagedProvider)
	if m == nil || !ok {
		return func() {}
	}
	admin := mp.Management()
	reg, err := m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		d, err := admin.GetQueueDepths(ctx)
		if err != nil {
			return err
		}
		for _, q := range []struct {
			name string
			n    uint64
		}{{"orchestrator", d.OrchestratorQueue}, {"worker", d.WorkerQueue}, {"timer", d.TimerQueue}} {
			o.ObserveInt64(m.depth, int64(q.n), metric.WithAttributes(attrQueue.String(q.name)))
		}
		for _, q := range []struct {
			name   string
			oldest time.Time
		}{{"orchestrator", d.OrchestratorOldestReady}, {"worker", d.WorkerOldestReady}} {
			age := 0.0
			if !q.oldest.IsZero() {
				age = max(0, time.Since(q.oldest).Seconds())
			}
			o.ObserveFloat64(m.age, age, metric.WithAttributes(attrQueue.String(q.name)))
		}
		return nil
	}, m.depth, m.age)
	if err != nil {
		log.Warn("queue depth metric not registered", "err", err)
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

// turnRan records a turn's duration.
func (m *metrics) turnRan(name, status string, resumed bool, d time.Duration) {
	if m != nil {
		m.turn.Record(context.Background(), d.Seconds(), metric.WithAttributes(
			attrOrchestration.String(name), attrStatus.String(status), attrResumed.Bool(resumed)))
	}
}

// activityRan records an activity execution's duration and outcome.
func (m *metrics) activityRan(name, outcome string, d time.Duration) {
	if m != nil {
		m.activity.Record(context.Background(), d.Seconds(), metric.WithAttributes(attrActivity.String(name), attrOutcome.String(outcome)))
	}
}

// executionEnded records the duration of an execution a committed turn ended: from
// its OrchestrationStarted event to the turn's last event.
func (m *metrics) executionEnded(item *provider.OrchestrationItem, ack provider.OrchestrationAck) {
	if m == nil || len(ack.HistoryDelta) == 0 || ack.Metadata.Status == nil {
		return
	}
	started := &ack.HistoryDelta[0]
	if ack.ExecutionID == item.ExecutionID && len(item.History) > 0 {
		started = &item.History[0]
	}
	last := ack.HistoryDelta[len(ack.HistoryDelta)-1]
	d := time.Duration(last.TimestampMs-started.TimestampMs) * time.Millisecond
	m.execution.Record(context.Background(), d.Seconds(), metric.WithAttributes(
		attrOrchestration.String(started.Name), attrStatus.String(*ack.Metadata.Status)))
}

// poisoned counts work of type ("orchestration", "activity") given up.
func (m *metrics) poisoned(typ string) {
	if m != nil {
		m.poison.Add(context.Background(), 1, metric.WithAttributes(attrPoisonType.String(typ)))
	}
}

// lostLock counts a lock lost while work ("orchestration", "activity") ran.
func (m *metrics) lostLock(work string) {
	if m != nil {
		m.lockLost.Add(context.Background(), 1, metric.WithAttributes(attrWork.String(work)))
	}
}
