// Package fill stores many orchestration instances fast, for benchmarks and demos of
// the management API over large databases.
//
// The instances are what the runtime stores when it runs them: the runtime's
// engine (runtime.RunTurn) computes each turn from the messages the queues would
// deliver, and the event store receives, in its bulk commit (StoreTx.Commit), the
// writes the runtime adapter makes for each turn. Only the queues are skipped: a
// thousand instances cost two bulk commits in one transaction instead of a dozen
// transactions of queue traffic. (The runtime leaves nothing in the queues for
// these instances but the orchestrator queue's version pin of each, which only
// capability filtering reads: a fill instance counts as unpinned there.)
package fill

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
	"github.com/duroq/duroq/txn"
)

// Names are the orchestrations the instances run, in turn: instance i runs
// Names[i%len(Names)].
var Names = [...]string{"Checkout", "Refund", "Report", "Onboarding"}

// Version is the orchestration version every instance runs.
const Version = "1.0.0"

// Options tune Instances. The zero value is usable.
type Options struct {
	// Prefix starts every instance id (default "fill-"): instance i is
	// ID(Prefix, i), and instances are stored in order of their numbers.
	Prefix string
	// Batch is how many instances each transaction stores (default 1000).
	Batch int
}

// ID is the id of the instance numbered i, with Options.Prefix prefix.
func ID(prefix string, i int) string { return fmt.Sprintf("%s%08d", prefix, i) }

// The outcomes of the instances: of every ten, instance i%10 == 0 fails, 1 and 2
// keep running, the others complete.
const (
	planComplete = "complete"
	planFail     = "fail"
	planWait     = "wait"
)

func plan(i int) string {
	switch i % 10 {
	case 0:
		return planFail
	case 1, 2:
		return planWait
	}
	return planComplete
}

// input is the input of instance i: its number and its outcome.
func input(i int) string { return fmt.Sprintf(`{"order":%d,"plan":%q}`, i, plan(i)) }

// orchestration is what every instance runs: one activity, "Charge", which fails
// for the instances that fail (their orchestration fails with its error); the
// running ones then wait for an "Approval" event that never comes.
func orchestration(ctx *runtime.Context, input string) (string, error) {
	receipt, err := ctx.ScheduleActivity("Charge", input).Get()
	if err != nil {
		return "", err
	}
	if strings.Contains(input, planWait) {
		if _, err := ctx.WaitForEvent("Approval").Get(); err != nil {
			return "", err
		}
	}
	return receipt, nil
}

// charge is what the activity does: it fails for the instances that fail.
func charge(input string) (string, error) {
	if strings.Contains(input, planFail) {
		return "", errors.New("card declined")
	}
	return fmt.Sprintf(`{"charged":%s}`, input), nil
}

// completion is the reply a worker sends for a Charge activity, as the runtime's
// activity dispatcher builds it.
func completion(item *provider.WorkItem) provider.WorkItem {
	result, err := charge(item.Input)
	if err != nil {
		return provider.WorkItem{Kind: provider.WorkActivityFailed, Instance: item.Instance, ExecutionID: item.ExecutionID, ID: item.ID,
			Details: &provider.ErrorDetails{Kind: provider.ErrorApplication, AppKind: provider.AppActivityFailed, Message: err.Error()}}
	}
	return provider.WorkItem{Kind: provider.WorkActivityCompleted, Instance: item.Instance, ExecutionID: item.ExecutionID, ID: item.ID,
		Result: result}
}

// Instances stores n instances, numbered from 0, in s, each with four or five
// events in one execution: 70% completed, 20% running (waiting for an event), 10%
// failed, running the orchestrations of Names. Their times are those of s's clock
// when the fill wrote them: every instance's two turns are two writes, as when the
// runtime runs it. An instance whose id s already holds fails the fill.
func Instances(ctx context.Context, s eventstore.TxStore, n int, o Options) error {
	if o.Prefix == "" {
		o.Prefix = "fill-"
	}
	if o.Batch <= 0 {
		o.Batch = 1000
	}
	// The turns of the next batch are computed while the store writes this one.
	batches := make(chan batch, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(batches)
		for from := 0; from < n; from += o.Batch {
			b, err := turns(o.Prefix, from, min(from+o.Batch, n))
			select {
			case batches <- batch{b, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for b := range batches {
		if b.err != nil {
			return b.err
		}
		if err := s.Database().Run(ctx, func(ctx context.Context, tx txn.Tx) error {
			st, err := s.In(tx)
			if err != nil {
				return err
			}
			for _, commits := range b.turns {
				if err := st.Commit(ctx, commits); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
	}
	return ctx.Err()
}

// batch is the store's commits of a batch of instances: their first turns, then
// their second.
type batch struct {
	turns [2][]eventstore.StreamCommit
	err   error
}

// turns computes the turns of instances from to until (excluded): the first runs
// the start message a client enqueues and schedules the activity, the second runs
// the activity's completion and ends the execution or waits.
func turns(prefix string, from, until int) ([2][]eventstore.StreamCommit, error) {
	var commits [2][]eventstore.StreamCommit
	for i := from; i < until; i++ {
		instance := ID(prefix, i)
		start := provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: instance,
			ExecutionID: provider.InitialExecutionID, Name: Names[i%len(Names)], Version: Version, Input: input(i)}
		first := runtime.RunTurn(runtime.Turn{Instance: instance, ExecutionID: provider.InitialExecutionID,
			Messages: []provider.WorkItem{start}, Now: time.Now(), RuntimeVersion: runtime.Version}, orchestration)
		if len(first.WorkerItems) != 1 {
			return commits, fmt.Errorf("fill: instance %s: the first turn scheduled %d activities, want 1", instance, len(first.WorkerItems))
		}
		second := runtime.RunTurn(runtime.Turn{Instance: instance, ExecutionID: provider.InitialExecutionID, History: first.NewEvents,
			Messages: []provider.WorkItem{completion(&first.WorkerItems[0])}, Now: time.Now(), RuntimeVersion: runtime.Version}, orchestration)
		for t, res := range []runtime.TurnResult{first, second} {
			c, err := commit(instance, res, t == 0)
			if err != nil {
				return commits, err
			}
			commits[t] = append(commits[t], c)
		}
	}
	return commits, nil
}

// commit is the store's part of a turn's ack, as the runtime adapter writes it: the
// turn's events, appended to the execution, and the metadata the runtime sets (the
// orchestration and the runtime's version pin on an execution's first turn, the
// status and output when it ends).
func commit(instance string, res runtime.TurnResult, first bool) (eventstore.StreamCommit, error) {
	c := eventstore.StreamCommit{Stream: instance, Events: make([]eventstore.Event, len(res.NewEvents)),
		Update: eventstore.StreamUpdate{Partition: int64(provider.InitialExecutionID)}}
	for i := range res.NewEvents {
		e := &res.NewEvents[i]
		data, err := provider.MarshalEvent(e)
		if err != nil {
			return c, fmt.Errorf("fill: instance %s: %w", instance, err)
		}
		c.Events[i] = eventstore.Event{Seq: int64(e.EventID), Type: string(e.Kind), Data: data}
	}
	if first {
		pin := runtime.Version
		c.Update.Name, c.Update.Version, c.Update.Parent, c.Update.PinnedVersion = &res.Name, &res.Version, &res.ParentInstance, &pin
	}
	if res.Status != provider.StatusRunning {
		status := eventstore.Status(res.Status)
		c.Update.Status, c.Update.Output = &status, &res.Output
	}
	return c, nil
}
