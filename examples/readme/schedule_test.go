package readme_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/schedule"
	"github.com/duroq/duroq/sqliteprovider"
)

// Durable schedules (README): a nightly report orchestration in Paris time and a
// heartbeat message every second, on the runtime's SQLite file.
func Example_schedules() {
	dir, err := os.MkdirTemp("", "duroq-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	p, err := sqliteprovider.Open(filepath.Join(dir, "app.db"), sqliteprovider.Options{})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop() // before Close: the runtime and the scheduler stop first
	reg := runtime.NewRegistry()
	if err := reg.RegisterOrchestration("Report", func(ctx *runtime.Context, period string) (string, error) {
		return period + " report", nil
	}); err != nil {
		panic(err)
	}
	rt, err := runtime.New(p, reg, runtime.Options{})
	if err != nil {
		panic(err)
	}
	go rt.Run(ctx)

	schedules, err := schedule.NewManager(p.Queue(), schedule.ManagerOptions{}) // the provider's queue, on every backend
	if err != nil {
		panic(err)
	}
	_, err = schedules.Create(ctx, schedule.Schedule{
		ID:       "nightly-report",
		Cron:     "0 3 * * *",
		TimeZone: "Europe/Paris",
		Jitter:   time.Minute,
		Catchup:  schedule.CatchupOne, // after downtime: the latest missed slot, once
		// Each slot starts the instance whose id is the slot id.
		Orchestration: &schedule.OrchestrationTarget{Name: "Report", Input: "daily"},
	})
	if err != nil && !errors.Is(err, schedule.ErrExists) { // each process may create it at start-up
		panic(err)
	}
	_, err = schedules.Create(ctx, schedule.Schedule{
		ID:      "heartbeat",
		Every:   time.Second,
		Enqueue: &schedule.EnqueueTarget{Queue: "heartbeats", Payload: []byte("ping")}, // message key = slot id
	})
	if err != nil && !errors.Is(err, schedule.ErrExists) {
		panic(err)
	}
	scheduler, err := schedule.NewScheduler(p.Queue(), schedule.SchedulerOptions{Starter: rt.Client()})
	if err != nil {
		panic(err)
	}
	go scheduler.Run(ctx) // in every process: each slot fires once across them

	b, err := p.Queue().DequeueBatch(ctx, "heartbeats", mq.DequeueOptions{Wait: 5 * time.Second})
	if err != nil || b == nil {
		panic(fmt.Sprint("no heartbeat: ", err))
	}
	id, slot, err := schedule.ParseSlotID(b.Messages[0].Key)
	if err != nil {
		panic(err)
	}
	fmt.Println(id, string(b.Messages[0].Payload), slot.Nanosecond() == 0)
	page, err := schedules.List(ctx, schedule.ListOptions{})
	if err != nil {
		panic(err)
	}
	for _, in := range page.Schedules {
		fmt.Println(in.ID, in.Cron, in.TimeZone, in.Every, in.Catchup)
	}
	// Output:
	// heartbeat ping true
	// heartbeat   1s one
	// nightly-report 0 3 * * * Europe/Paris 0s one
}
