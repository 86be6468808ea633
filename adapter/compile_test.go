package adapter_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/duroq/duroq/internal/sqliteconn/sqliteconntest"
	"github.com/duroq/duroq/runtime/provider"
)

// TestSQLiteHotPathIsCompiledOnce drives the SQLite provider through the turns of
// an orchestration, round after round with other instances, and checks that after
// the first round SQLite compiles nothing: a statement whose plan looked at a
// parameter would be recompiled at every run (see internal/sqliteconn). A round
// starts an instance, runs a turn that schedules an activity and a timer and sets
// a custom status and a KV value, runs and renews the activity, raises an event,
// fires the timer, completes the instance, reads it as clients do, and polls both
// empty queues, through the batched calls the runtime makes.
func TestSQLiteHotPathIsCompiledOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "duroq.db")
	compiles := sqliteconntest.CountCompiles(t, path)
	p, err := openSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	bp := p.(provider.BatchProvider) // what the runtime uses
	ctx := context.Background()
	lock := provider.FetchOptions{LockTimeout: provider.Duration(time.Minute)}
	workLock := provider.WorkFetchOptions{LockTimeout: provider.Duration(time.Minute)}
	status, completed, done, name, version, root := "waiting", provider.StatusCompleted, "done", "O", "1.0.0", ""
	compiles.Rounds(3, func(round int, do func(string, func() error)) {
		id := fmt.Sprint("instance-", round)
		var item *provider.OrchestrationItem
		fetch := func() error {
			items, err := bp.FetchOrchestrationItems(ctx, lock, 8)
			if err == nil && len(items) != 1 {
				return fmt.Errorf("%d orchestration items, want 1", len(items))
			}
			if err == nil {
				item = items[0]
			}
			return err
		}
		var lease *provider.WorkItemLease
		fireAt := time.Now().Add(-time.Second).UnixMilli() // due at once

		do("start", func() error {
			return p.(provider.InstanceStarter).StartInstance(ctx, provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: id,
				ExecutionID: 1, Name: "O", Version: "1.0.0"}, provider.StartRejectExisting)
		})
		do("fetch start", fetch)
		do("ack first turn", func() error {
			return p.AckOrchestrationItem(ctx, item.LockToken, provider.OrchestrationAck{ExecutionID: 1,
				HistoryDelta: []provider.Event{{Kind: provider.EventOrchestrationStarted, EventID: 1, Name: "O", Version: "1.0.0"},
					{Kind: provider.EventActivityScheduled, EventID: 2, Name: "A"},
					{Kind: provider.EventTimerCreated, EventID: 3, FireAtMs: fireAt},
					{Kind: provider.EventExternalSubscribed, EventID: 4, Name: "go"},
					{Kind: provider.EventCustomStatusUpdated, EventID: 5, Status: &status},
					{Kind: provider.EventKeyValueSet, EventID: 6, Key: "k", Value: id}},
				WorkerItems:       []provider.WorkItem{{Kind: provider.WorkActivityExecute, Instance: id, ExecutionID: 1, ID: 2, Name: "A"}},
				OrchestratorItems: []provider.WorkItem{{Kind: provider.WorkTimerFired, Instance: id, ExecutionID: 1, ID: 3, FireAtMs: fireAt}},
				Metadata:          provider.ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &version, ParentInstanceID: &root}})
		})
		do("fetch activity", func() error {
			leases, err := bp.FetchWorkItems(ctx, workLock, 8)
			if err == nil && len(leases) != 1 {
				return fmt.Errorf("%d work items, want 1", len(leases))
			}
			if err == nil {
				lease = leases[0]
			}
			return err
		})
		do("renew activity", func() error { return p.RenewWorkItemLock(ctx, lease.LockToken, provider.Duration(time.Minute)) })
		do("ack activity", func() error {
			return bp.AckWorkItems(ctx, []provider.WorkAck{{Token: lease.LockToken,
				Completion: &provider.WorkItem{Kind: provider.WorkActivityCompleted, Instance: id, ExecutionID: 1, ID: 2}}})
		})
		do("custom status", func() error { _, _, _, err := p.GetCustomStatus(ctx, id, 0); return err })
		do("kv", func() error { _, _, err := p.GetKVValue(ctx, id, "k"); return err })
		do("raise event", func() error {
			return p.EnqueueForOrchestrator(ctx, provider.WorkItem{Kind: provider.WorkExternalRaised, Instance: id, Name: "go", Data: "d"}, 0)
		})
		do("fetch completions", fetch)
		if len(item.Messages) != 3 {
			t.Fatalf("round %d: the second turn has %d messages, want the timer, the activity and the event", round, len(item.Messages))
		}
		do("ack last turn", func() error {
			return bp.AckOrchestrationItems(ctx, []provider.TurnAck{{Token: item.LockToken, Ack: provider.OrchestrationAck{ExecutionID: 1,
				HistoryDelta: []provider.Event{{Kind: provider.EventTimerFired, EventID: 7, SourceEventID: 3, FireAtMs: fireAt},
					{Kind: provider.EventActivityCompleted, EventID: 8, SourceEventID: 2},
					{Kind: provider.EventExternalEvent, EventID: 9, Name: "go", Data: "d"},
					{Kind: provider.EventOrchestrationCompleted, EventID: 10, Output: "done"}},
				Metadata: provider.ExecutionMetadata{Status: &completed, Output: &done}}}})
		})
		do("read", func() error { _, err := p.Read(ctx, id); return err })
		do("info", func() error { _, err := p.(provider.ManagedProvider).Management().GetInstanceInfo(ctx, id); return err })
		do("empty fetch", func() error {
			items, err := bp.FetchOrchestrationItems(ctx, lock, 8)
			if len(items) > 0 {
				err = fmt.Errorf("orchestration item left")
			}
			return err
		})
		do("empty work fetch", func() error {
			leases, err := bp.FetchWorkItems(ctx, workLock, 8)
			if len(leases) > 0 {
				err = fmt.Errorf("work item left")
			}
			return err
		})
	})
}
