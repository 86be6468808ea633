package schedule_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/schedule"
)

var _ schedule.Starter = (*runtime.Client)(nil)

// With the real runtime as Starter: a slot's instance started twice is one
// instance, and OverlapSkip, with Running built on Client.Status as
// SchedulerOptions documents, skips slots while the previous instance waits.
func TestOrchestrationTargetOnTheRuntime(t *testing.T) {
	ctx := t.Context()
	p := adapter.NewMemory(adapter.Options{})
	defer p.Close()
	reg := runtime.NewRegistry()
	if err := reg.RegisterOrchestration("Job", func(ctx *runtime.Context, in string) (string, error) {
		done, err := ctx.DequeueEvent("done").Get() // kept until taken, however early it is sent
		return in + " " + done, err
	}); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(p, reg, runtime.Options{MinPollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(runCtx) }()
	defer func() { stop(); <-ran }()
	client := rt.Client()

	// The schedules live in a queue of their own with a test clock.
	c := newClock(t0)
	q := mq.NewMemory(mq.MemoryOptions{Now: c.Now})
	m, err := schedule.NewManager(q, schedule.ManagerOptions{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	s, err := schedule.NewScheduler(q, schedule.SchedulerOptions{Now: c.Now, Starter: client,
		Running: func(ctx context.Context, id string) (bool, error) {
			st, err := client.Status(ctx, id)
			return !st.Terminal() && st.State != runtime.StateNotFound, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, schedule.Schedule{ID: "job", Every: time.Minute, Overlap: schedule.OverlapSkip,
		Orchestration: &schedule.OrchestrationTarget{Name: "Job", Input: "in"}}); err != nil {
		t.Fatal(err)
	}
	fire := func(hms string) {
		t.Helper()
		c.Set(at(hms))
		if n, err := s.FireDue(ctx); n != 1 || err != nil {
			t.Fatalf("FireDue at %s = %d, %v", hms, n, err)
		}
	}
	first := slot("job", "10:01:00")
	fire("10:01:00")
	// The start of an existing instance changes nothing: what a firing taken twice does.
	if err := client.StartOrchestration(ctx, first, "Job", "again"); err != nil {
		t.Fatalf("a second start of %s: %v", first, err)
	}
	fire("10:02:00") // first waits for "done": this slot is skipped
	if err := client.EnqueueEvent(ctx, first, "done", "done"); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := client.WaitForOrchestration(wait, first)
	if err != nil || st.State != runtime.StateCompleted || st.Output != "in done" || st.ExecutionID != 1 {
		t.Fatalf("%s: %+v, %v; want one execution of the first start, completed", first, st, err)
	}
	fire("10:03:00")
	admin, err := client.Admin()
	if err != nil {
		t.Fatal(err)
	}
	for { // the third start is queued: wait until the runtime ran it (the runtime's time is real)
		if st, err := client.Status(wait, slot("job", "10:03:00")); err != nil || st.State == runtime.StateRunning {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	ids, err := admin.ListInstances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if want := []string{first, slot("job", "10:03:00")}; !slices.Equal(ids, want) {
		t.Fatalf("instances %q, want %q: 10:02 skipped while 10:01 ran", ids, want)
	}
}
