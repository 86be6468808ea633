package schedule_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/schedule"
	"github.com/duroq/duroq/sqliteprovider"
)

// Schedules on the runtime's SQLite file: an orchestration started every second
// and a report message enqueued every night at 03:00 in Paris. Each process of
// the application runs a Scheduler on the same file; every slot fires once.
func Example() {
	dir, err := os.MkdirTemp("", "duroq-schedule")
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
	if err := reg.RegisterOrchestration("Tick", func(ctx *runtime.Context, in string) (string, error) {
		return "tock " + in, nil
	}); err != nil {
		panic(err)
	}
	rt, err := runtime.New(p, reg, runtime.Options{})
	if err != nil {
		panic(err)
	}
	go rt.Run(ctx)

	// The schedules live in the provider's queue, next to the runtime's.
	schedules, err := schedule.NewManager(p.Queue(), schedule.ManagerOptions{})
	if err != nil {
		panic(err)
	}
	tick, err := schedules.Create(ctx, schedule.Schedule{
		ID:            "tick",
		Every:         time.Second,
		Catchup:       schedule.CatchupAll, // a slot missed while the process was busy still fires
		Orchestration: &schedule.OrchestrationTarget{Name: "Tick", Input: "hello"},
	})
	if err != nil {
		panic(err)
	}
	if _, err := schedules.Create(ctx, schedule.Schedule{
		ID:       "nightly-report",
		Cron:     "0 3 * * *",
		TimeZone: "Europe/Paris",
		Jitter:   time.Minute,
		Enqueue:  &schedule.EnqueueTarget{Queue: "reports", Payload: []byte("daily")},
	}); err != nil {
		panic(err)
	}

	scheduler, err := schedule.NewScheduler(p.Queue(), schedule.SchedulerOptions{Starter: rt.Client()})
	if err != nil {
		panic(err)
	}
	go scheduler.Run(ctx)

	// The first slot's instance id is its slot id.
	st, err := rt.Client().WaitForOrchestration(ctx, schedule.SlotID("tick", tick.Next))
	if err != nil {
		panic(err)
	}
	fmt.Println(st.State, st.Output)
	page, err := schedules.List(ctx, schedule.ListOptions{})
	if err != nil {
		panic(err)
	}
	for _, in := range page.Schedules {
		fmt.Println(in.ID, in.Cron, in.TimeZone, in.Every, in.Catchup)
	}
	// Output:
	// Completed tock hello
	// nightly-report 0 3 * * * Europe/Paris 0s one
	// tick   1s all
}
