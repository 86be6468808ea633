package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/schedule"
)

// t0 is when every case starts: a Monday, 30 s past 10:00 UTC.
var t0 = time.Date(2026, 1, 5, 10, 0, 30, 0, time.UTC)

// at is the time hh:mm:ss on t0's day, UTC.
func at(hms string) time.Time {
	t, err := time.Parse(time.DateTime, "2026-01-05 "+hms)
	if err != nil {
		panic(err)
	}
	return t
}

// slot is the slot id of schedule id at hh:mm:ss on t0's day.
func slot(id, hms string) string { return schedule.SlotID(id, at(hms)) }

// env is one case's storage, clock and manager.
type env struct {
	t     *testing.T
	clock *clock
	open  func() mq.MessageQueue // another handle on the storage
	q     mq.MessageQueue
	m     *schedule.Manager
}

func newEnv(t *testing.T, b backend) *env {
	c := newClock(t0)
	open := b.newStorage(t, c.Now)
	q := open()
	m, err := schedule.NewManager(q, schedule.ManagerOptions{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, clock: c, open: open, q: q, m: m}
}

// scheduler is a Scheduler of q (nil: the env's queue) on the env's clock.
func (e *env) scheduler(q mq.MessageQueue, o schedule.SchedulerOptions) *schedule.Scheduler {
	e.t.Helper()
	o.Now = e.clock.Now
	s, err := schedule.NewScheduler(cmpQueue(q, e.q), o)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func cmpQueue(q, def mq.MessageQueue) mq.MessageQueue {
	if q == nil {
		return def
	}
	return q
}

func (e *env) create(s schedule.Schedule) schedule.Info {
	e.t.Helper()
	in, err := e.m.Create(e.t.Context(), s)
	if err != nil {
		e.t.Fatalf("Create(%s): %v", s.ID, err)
	}
	return in
}

func (e *env) get(id string) schedule.Info {
	e.t.Helper()
	in, err := e.m.Get(e.t.Context(), id)
	if err != nil {
		e.t.Fatalf("Get(%s): %v", id, err)
	}
	return in
}

// fire runs s.FireDue at hh:mm:ss (or now, if empty) and checks how many firings
// it handled.
func (e *env) fire(s *schedule.Scheduler, hms string, want int) {
	e.t.Helper()
	if hms != "" {
		e.clock.Set(at(hms))
	}
	n, err := s.FireDue(e.t.Context())
	if err != nil {
		e.t.Fatalf("FireDue at %s: %v", e.clock.Now().Format(time.TimeOnly), err)
	}
	if n != want {
		e.t.Fatalf("FireDue at %s handled %d firings, want %d", e.clock.Now().Format(time.TimeOnly), n, want)
	}
}

// fired takes every visible message of queue and returns their keys in delivery
// order.
func (e *env) fired(queue string) []string {
	e.t.Helper()
	ds := e.deliveries(queue)
	keys := make([]string, len(ds))
	for i, d := range ds {
		keys[i] = d.Key
	}
	return keys
}

func (e *env) deliveries(queue string) []mq.Delivery {
	e.t.Helper()
	var out []mq.Delivery
	for {
		b, err := e.q.DequeueBatch(e.t.Context(), queue, mq.DequeueOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		if b == nil {
			return out
		}
		out = append(out, b.Messages...)
		if err := e.q.Ack(e.t.Context(), b.Token); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) wantFired(queue string, want ...string) {
	e.t.Helper()
	if got := e.fired(queue); !slices.Equal(got, want) {
		e.t.Fatalf("queue %s received %q, want %q", queue, got, want)
	}
}

func wantTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// starter records the instances started, and runs hook (if set) at each start.
type starter struct {
	mu        sync.Mutex
	instances []string
	hook      func(instance string) error
}

func (s *starter) StartOrchestration(_ context.Context, instance, name, input string) error {
	if s.hook != nil {
		if err := s.hook(instance); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instances = append(s.instances, instance)
	return nil
}

func (s *starter) started() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.instances)
}

func every(id string, d time.Duration, queue string) schedule.Schedule {
	return schedule.Schedule{ID: id, Every: d, Enqueue: &schedule.EnqueueTarget{Queue: queue, Payload: []byte(id)}}
}

type suiteCase struct {
	name string
	fn   func(t *testing.T, e *env)
}

var suite = []suiteCase{
	{"IntervalFiresEachSlotOnce", testIntervalFiresEachSlotOnce},
	{"CronInTimeZone", testCronInTimeZone},
	{"JitterDelaysTheFiringNotTheSlot", testJitter},
	{"CatchupSkip", testCatchupSkip},
	{"CatchupOne", testCatchupOne},
	{"CatchupAll", testCatchupAll},
	{"OverlapSkip", testOverlapSkip},
	{"FailedStartIsRetried", testFailedStartIsRetried},
	{"PauseResume", testPauseResume},
	{"UpdateReplacesTheDefinition", testUpdate},
	{"DeleteAndCreateAgain", testDelete},
	{"ListPagesInIDOrder", testList},
	{"UnreadableScheduleIsKept", testUnreadable},
	{"SlotIDTakenInTheTargetQueue", testSlotIDTaken},
	{"DeleteOrPauseDuringAFiring", testChangeDuringFiring},
	{"TwoSchedulersFireEachSlotOnce", testTwoSchedulers},
	{"CrashedFiringFiresOnceAfterItsLockLapses", testCrashedFiring},
}

// TestSchedules runs every case on every backend (PostgreSQL with
// DUROQ_POSTGRES_DSN), each on a storage of its own.
func TestSchedules(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			for _, c := range suite {
				t.Run(c.name, func(t *testing.T) { c.fn(t, newEnv(t, b)) })
			}
		})
	}
}

func testIntervalFiresEachSlotOnce(t *testing.T, e *env) {
	in := e.create(schedule.Schedule{ID: "tick", Every: time.Minute,
		Enqueue: &schedule.EnqueueTarget{Queue: "ticks", RoutingKey: "rk", Tag: "t", Payload: []byte("hello")}})
	wantTime(t, "Next", in.Next, at("10:01:00"))
	wantTime(t, "FiresAt", in.FiresAt, at("10:01:00"))
	if in.Catchup != schedule.CatchupOne || in.Overlap != schedule.OverlapAllow || in.MaxCatchup != schedule.DefaultMaxCatchup ||
		in.CatchupWindow != schedule.DefaultCatchupWindow || !in.Anchor.Equal(time.Unix(0, 0)) {
		t.Fatalf("Create did not fill in the defaults: %+v", in.Schedule)
	}
	s := e.scheduler(nil, schedule.SchedulerOptions{})
	e.fire(s, "", 0)
	e.fire(s, "10:00:59", 0)
	for i := 1; i <= 5; i++ {
		hms := fmt.Sprintf("10:%02d:00", i)
		e.fire(s, hms, 1)
		ds := e.deliveries("ticks")
		if len(ds) != 1 || ds[0].Key != slot("tick", hms) || string(ds[0].Payload) != "hello" || ds[0].Tag != "t" {
			t.Fatalf("slot %s delivered %+v", hms, ds)
		}
		e.fire(s, "", 0) // fired once
	}
	got := e.get("tick")
	wantTime(t, "Next after 10:05", got.Next, at("10:06:00"))
	if got.Firing || got.Paused || got.Attempt != 0 {
		t.Fatalf("Get = %+v", got)
	}
}

func testCronInTimeZone(t *testing.T, e *env) {
	target := &schedule.EnqueueTarget{Queue: "ticks"}
	paris := e.create(schedule.Schedule{ID: "paris", Cron: "0 9 * * *", TimeZone: "Europe/Paris", Enqueue: target})
	wantTime(t, "Next of 09:00 in Paris", paris.Next, time.Date(2026, 1, 6, 8, 0, 0, 0, time.UTC))
	if paris.TimeZone != "Europe/Paris" {
		t.Fatalf("TimeZone = %q", paris.TimeZone)
	}
	secs := e.create(schedule.Schedule{ID: "secs", Cron: "*/20 * * * * *", Enqueue: target})
	wantTime(t, "Next of every 20 s", secs.Next, at("10:00:40"))
	if secs.TimeZone != "UTC" {
		t.Fatalf("TimeZone of a schedule without one = %q, want UTC", secs.TimeZone)
	}
	hourly := e.create(schedule.Schedule{ID: "hourly", Cron: "@hourly", Enqueue: target})
	wantTime(t, "Next of @hourly", hourly.Next, at("11:00:00"))

	s := e.scheduler(nil, schedule.SchedulerOptions{})
	e.fire(s, "10:00:40", 1)
	e.fire(s, "10:01:00", 1)
	e.wantFired("ticks", slot("secs", "10:00:40"), slot("secs", "10:01:00"))
	e.clock.Set(paris.Next)
	e.fire(s, "", 3) // paris, hourly and secs (once: CatchupOne)
	got := e.fired("ticks")
	slices.Sort(got)
	// CatchupOne: the latest passed slot of each, however late.
	want := []string{schedule.SlotID("hourly", paris.Next), schedule.SlotID("paris", paris.Next), schedule.SlotID("secs", paris.Next)}
	if !slices.Equal(got, want) {
		t.Fatalf("fired %q, want %q", got, want)
	}
	wantTime(t, "Next of paris", e.get("paris").Next, time.Date(2026, 1, 7, 8, 0, 0, 0, time.UTC))
}

func testJitter(t *testing.T, e *env) {
	const n, jitter = 20, 30 * time.Second
	distinct := map[time.Time]bool{}
	for i := range n {
		s := every(fmt.Sprintf("j%02d", i), time.Minute, "ticks")
		s.Jitter = jitter
		in := e.create(s)
		wantTime(t, "Next", in.Next, at("10:01:00"))
		stored := e.get(s.ID).FiresAt
		if !stored.Equal(in.FiresAt) || in.FiresAt.Before(in.Next) || !in.FiresAt.Before(in.Next.Add(jitter)) {
			t.Fatalf("FiresAt = %v (stored %v), want in [%v, %v)", in.FiresAt, stored, in.Next, in.Next.Add(jitter))
		}
		distinct[in.FiresAt] = true
	}
	if len(distinct) < 2 {
		t.Fatalf("%d schedules with a 30 s jitter all fire at %v", n, distinct)
	}
	s := e.scheduler(nil, schedule.SchedulerOptions{})
	e.fire(s, "10:01:30", n)
	got := e.fired("ticks")
	if len(got) != n {
		t.Fatalf("fired %d slots, want %d", len(got), n)
	}
	for _, id := range got {
		if !strings.HasSuffix(id, "@2026-01-05T10:01:00Z") {
			t.Fatalf("slot id %q: the jitter moved the slot", id)
		}
	}
	for i := range n {
		in := e.get(fmt.Sprintf("j%02d", i))
		if !in.Next.Equal(at("10:02:00")) || in.FiresAt.Before(in.Next) || !in.FiresAt.Before(in.Next.Add(jitter)) {
			t.Fatalf("after firing: Next %v, FiresAt %v", in.Next, in.FiresAt)
		}
	}
}

func testCatchupSkip(t *testing.T, e *env) {
	strict := every("strict", time.Minute, "strict")
	strict.Catchup, strict.CatchupWindow = schedule.CatchupSkip, 10*time.Second
	e.create(strict)
	lenient := every("lenient", time.Minute, "lenient")
	lenient.Catchup = schedule.CatchupSkip // DefaultCatchupWindow: a minute
	e.create(lenient)
	s := e.scheduler(nil, schedule.SchedulerOptions{})
	// Down from 10:00:30 to 10:10:30: ten slots passed, the latest 30 s ago.
	e.fire(s, "10:10:30", 2)
	e.wantFired("strict")
	e.wantFired("lenient", slot("lenient", "10:10:00"))
	wantTime(t, "Next of strict", e.get("strict").Next, at("10:11:00"))
	e.fire(s, "10:11:05", 2) // 5 s late: on time for both
	e.wantFired("strict", slot("strict", "10:11:00"))
	e.wantFired("lenient", slot("lenient", "10:11:00"))
}

func testCatchupOne(t *testing.T, e *env) {
	e.create(every("one", time.Minute, "ticks"))
	s := e.scheduler(nil, schedule.SchedulerOptions{})
	e.fire(s, "10:10:30", 1)
	e.wantFired("ticks", slot("one", "10:10:00"))
	wantTime(t, "Next", e.get("one").Next, at("10:11:00"))
	e.clock.Set(at("14:00:00").Add(time.Nanosecond)) // hours later, a slot just passed
	e.fire(s, "", 1)
	e.wantFired("ticks", slot("one", "14:00:00"))
}

func testCatchupAll(t *testing.T, e *env) {
	all := every("all", time.Minute, "all")
	all.Catchup = schedule.CatchupAll
	e.create(all)
	bounded := every("bounded", time.Minute, "bounded")
	bounded.Catchup, bounded.MaxCatchup = schedule.CatchupAll, 3
	e.create(bounded)
	many := every("many", time.Second, "many") // more slots than one firing fires
	many.Catchup, many.MaxCatchup = schedule.CatchupAll, 250
	e.create(many)
	s := e.scheduler(nil, schedule.SchedulerOptions{})
	e.fire(s, "10:10:30", 2+3) // many: 100 + 100 + 50 slots

	var want []string
	for m := 1; m <= 10; m++ {
		want = append(want, slot("all", fmt.Sprintf("10:%02d:00", m)))
	}
	e.wantFired("all", want...)
	e.wantFired("bounded", slot("bounded", "10:08:00"), slot("bounded", "10:09:00"), slot("bounded", "10:10:00"))
	got := e.fired("many")
	want = nil
	for i := 249; i >= 0; i-- {
		want = append(want, schedule.SlotID("many", at("10:10:30").Add(-time.Duration(i)*time.Second)))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("many fired %d slots from %q to %q, want the latest 250, %q to %q", len(got), got[0], got[len(got)-1], want[0], want[249])
	}
	wantTime(t, "Next of many", e.get("many").Next, at("10:10:31"))
	e.fire(s, "10:11:00", 3)
	e.wantFired("all", slot("all", "10:11:00"))
}

func testOverlapSkip(t *testing.T, e *env) {
	st := &starter{}
	var mu sync.Mutex
	running := map[string]bool{}
	var asked []string
	s := e.scheduler(nil, schedule.SchedulerOptions{Starter: st, Running: func(_ context.Context, id string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, id)
		return running[id], nil
	}})
	st.hook = func(id string) error {
		mu.Lock()
		defer mu.Unlock()
		running[id] = true
		return nil
	}
	target := &schedule.OrchestrationTarget{Name: "Report", Input: "in"}
	e.create(schedule.Schedule{ID: "skip", Every: time.Minute, Overlap: schedule.OverlapSkip, Orchestration: target})
	e.create(schedule.Schedule{ID: "allow", Every: time.Minute, Orchestration: target})

	e.fire(s, "10:01:00", 2)
	e.fire(s, "10:02:00", 2) // skip@10:01 still runs: skip@10:02 does not start
	if got := e.get("skip").LastInstance; got != slot("skip", "10:01:00") {
		t.Fatalf("LastInstance = %q", got)
	}
	mu.Lock()
	running[slot("skip", "10:01:00")] = false
	mu.Unlock()
	e.fire(s, "10:03:00", 2)
	got := st.started()
	slices.Sort(got)
	want := []string{slot("allow", "10:01:00"), slot("allow", "10:02:00"), slot("allow", "10:03:00"), slot("skip", "10:01:00"), slot("skip", "10:03:00")}
	if !slices.Equal(got, want) {
		t.Fatalf("started %q, want %q", got, want)
	}
	if want := []string{slot("skip", "10:01:00"), slot("skip", "10:01:00")}; !slices.Equal(asked, want) {
		t.Fatalf("Running was asked about %q, want %q (only OverlapSkip asks)", asked, want)
	}
	if got := e.get("skip").LastInstance; got != slot("skip", "10:03:00") {
		t.Fatalf("LastInstance = %q", got)
	}
}

func testFailedStartIsRetried(t *testing.T, e *env) {
	e.create(schedule.Schedule{ID: "orch", Every: time.Minute, Orchestration: &schedule.OrchestrationTarget{Name: "Report"}})
	none := e.scheduler(nil, schedule.SchedulerOptions{})
	e.clock.Set(at("10:01:00"))
	if n, err := none.FireDue(e.t.Context()); n != 1 || err == nil || !strings.Contains(err.Error(), "Starter") {
		t.Fatalf("FireDue without a Starter = %d, %v; want 1 and an error saying a Starter is missing", n, err)
	}
	fails := errors.New("runtime unavailable")
	st := &starter{hook: func(string) error { return fails }}
	s := e.scheduler(nil, schedule.SchedulerOptions{Starter: st})
	e.clock.Advance(time.Second) // the firing is put back for a second
	if n, err := s.FireDue(e.t.Context()); n != 1 || !errors.Is(err, fails) {
		t.Fatalf("FireDue with a failing Starter = %d, %v", n, err)
	}
	in := e.get("orch")
	if in.Attempt != 2 || !strings.Contains(in.LastError, "runtime unavailable") || !in.Next.Equal(at("10:01:00")) {
		t.Fatalf("after two failed attempts Get = %+v", in)
	}
	st.hook = nil
	e.fire(s, "", 0) // backing off
	e.clock.Advance(2 * time.Second)
	e.fire(s, "", 1)
	if got := st.started(); !slices.Equal(got, []string{slot("orch", "10:01:00")}) {
		t.Fatalf("started %q", got)
	}
}

func testPauseResume(t *testing.T, e *env) {
	ctx := t.Context()
	e.create(every("p", time.Minute, "ticks"))
	in, err := e.m.Pause(ctx, "p")
	if err != nil || !in.Paused || !in.Next.IsZero() || !in.FiresAt.IsZero() {
		t.Fatalf("Pause = %+v, %v", in, err)
	}
	if in, err := e.m.Pause(ctx, "p"); err != nil || !in.Paused {
		t.Fatalf("Pause of a paused schedule = %+v, %v", in, err)
	}
	if got := e.get("p"); !got.Paused || got.Every != time.Minute {
		t.Fatalf("Get of a paused schedule = %+v", got)
	}
	s := e.scheduler(nil, schedule.SchedulerOptions{})
	e.fire(s, "10:05:30", 0)
	e.wantFired("ticks")
	in, err = e.m.Resume(ctx, "p")
	if err != nil || in.Paused || !in.Next.Equal(at("10:06:00")) || !in.FiresAt.Equal(in.Next) {
		t.Fatalf("Resume = %+v, %v; want Next 10:06: the paused slots never fire", in, err)
	}
	if again, err := e.m.Resume(ctx, "p"); err != nil || !again.Next.Equal(in.Next) {
		t.Fatalf("Resume of a running schedule = %+v, %v", again, err)
	}
	e.fire(s, "10:06:00", 1)
	e.wantFired("ticks", slot("p", "10:06:00"))
	for _, op := range []func(context.Context, string) (schedule.Info, error){e.m.Pause, e.m.Resume} {
		if _, err := op(ctx, "missing"); !errors.Is(err, schedule.ErrNotFound) {
			t.Fatalf("Pause/Resume of a missing schedule: %v, want ErrNotFound", err)
		}
	}
}

func testUpdate(t *testing.T, e *env) {
	ctx := t.Context()
	st := &starter{}
	s := e.scheduler(nil, schedule.SchedulerOptions{Starter: st})
	e.create(schedule.Schedule{ID: "u", Every: time.Minute, Orchestration: &schedule.OrchestrationTarget{Name: "Report"}})
	e.fire(s, "10:01:00", 1)
	in, err := e.m.Update(ctx, schedule.Schedule{ID: "u", Cron: "30 10 * * *", TimeZone: "Europe/Paris",
		Enqueue: &schedule.EnqueueTarget{Queue: "reports", Payload: []byte("daily")}})
	if err != nil || in.Cron != "30 10 * * *" || in.Every != 0 || in.Orchestration != nil || in.Enqueue == nil ||
		!in.Next.Equal(at("09:30:00").Add(24*time.Hour)) || in.LastInstance != slot("u", "10:01:00") {
		t.Fatalf("Update = %+v, %v; want the cron definition, next 10:30 Paris tomorrow, the last instance kept", in, err)
	}
	if got := e.get("u"); got.Cron != in.Cron || got.TimeZone != "Europe/Paris" || !got.Next.Equal(in.Next) {
		t.Fatalf("Get after Update = %+v", got)
	}
	e.fire(s, "10:02:00", 0) // the old definition's slot is gone
	e.clock.Set(at("09:30:00").Add(24 * time.Hour))
	e.fire(s, "", 1)
	e.wantFired("reports", schedule.SlotID("u", at("09:30:00").Add(24*time.Hour)))

	// A paused schedule stays paused.
	if _, err := e.m.Pause(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	if in, err := e.m.Update(ctx, every("u", time.Hour, "reports")); err != nil || !in.Paused || in.Every != time.Hour {
		t.Fatalf("Update of a paused schedule = %+v, %v", in, err)
	}
	if _, err := e.m.Update(ctx, every("missing", time.Hour, "reports")); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("Update of a missing schedule: %v, want ErrNotFound", err)
	}
	if _, err := e.m.Update(ctx, schedule.Schedule{ID: "u", Every: time.Hour}); !errors.Is(err, schedule.ErrInvalid) {
		t.Fatalf("Update without a target: %v, want ErrInvalid", err)
	}
	if got := e.get("u"); !got.Paused || got.Every != time.Hour {
		t.Fatalf("a refused Update changed the schedule: %+v", got)
	}
}

func testDelete(t *testing.T, e *env) {
	ctx := t.Context()
	e.create(every("d", time.Minute, "ticks"))
	if _, err := e.m.Create(ctx, every("d", time.Hour, "other")); !errors.Is(err, schedule.ErrExists) {
		t.Fatalf("Create of an existing id: %v, want ErrExists", err)
	}
	if err := e.m.Delete(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Get(ctx, "d"); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := e.m.Delete(ctx, "d"); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("Delete of a deleted schedule: %v, want ErrNotFound", err)
	}
	s := e.scheduler(nil, schedule.SchedulerOptions{})
	e.fire(s, "10:05:00", 0)
	e.create(every("d", time.Hour, "other"))
	e.fire(s, "11:00:00", 1)
	e.wantFired("ticks")
	e.wantFired("other", slot("d", "11:00:00"))
}

func testList(t *testing.T, e *env) {
	ctx := t.Context()
	for _, id := range []string{"s3", "s1", "s5", "s2", "s4"} {
		e.create(every(id, time.Minute, "ticks"))
	}
	if _, err := e.m.Pause(ctx, "s4"); err != nil {
		t.Fatal(err)
	}
	e.fire(e.scheduler(nil, schedule.SchedulerOptions{}), "10:01:00", 4) // new messages, new message ids
	var pages [][]string
	for after := ""; ; {
		p, err := e.m.List(ctx, schedule.ListOptions{After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, in := range p.Schedules {
			ids = append(ids, in.ID)
			if in.Paused != (in.ID == "s4") || (!in.Paused && !in.Next.Equal(at("10:02:00"))) {
				t.Fatalf("List: %+v", in)
			}
		}
		pages = append(pages, ids)
		if after = p.Next; after == "" {
			break
		}
	}
	if fmt.Sprint(pages) != "[[s1 s2] [s3 s4] [s5]]" {
		t.Fatalf("pages %v", pages)
	}
	if p, err := e.m.List(ctx, schedule.ListOptions{}); err != nil || len(p.Schedules) != 5 || p.Next != "" {
		t.Fatalf("List = %+v, %v", p, err)
	}
	if _, err := e.m.List(ctx, schedule.ListOptions{Limit: -1}); !errors.Is(err, schedule.ErrInvalid) {
		t.Fatalf("List with Limit -1: %v", err)
	}
}

func testUnreadable(t *testing.T, e *env) {
	ctx := t.Context()
	e.create(every("good", time.Minute, "ticks"))
	bad := mq.Message{Queue: schedule.DefaultQueue, Key: "bad", RoutingKey: "bad", Payload: []byte(`{"v":99,"id":"bad"}`)}
	if err := e.q.Enqueue(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Get(ctx, "bad"); !errors.Is(err, schedule.ErrUnreadable) {
		t.Fatalf("Get of an unreadable schedule: %v", err)
	}
	if _, err := e.m.List(ctx, schedule.ListOptions{}); !errors.Is(err, schedule.ErrUnreadable) || !strings.Contains(err.Error(), `"bad"`) {
		t.Fatalf("List with an unreadable schedule: %v", err)
	}
	s := e.scheduler(nil, schedule.SchedulerOptions{})
	if n, err := s.FireDue(ctx); n != 1 || !errors.Is(err, schedule.ErrUnreadable) {
		t.Fatalf("FireDue of an unreadable schedule = %d, %v", n, err)
	}
	e.fire(s, "10:01:00", 1) // "good" fires; "bad" waits a minute, kept
	if st, err := e.q.Stats(ctx, schedule.DefaultQueue); err != nil || st.Delayed != 2 {
		t.Fatalf("schedules queue: %+v, %v; want good and bad delayed", st, err)
	}
	if err := e.m.Delete(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	e.wantFired("ticks", slot("good", "10:01:00"))
}

// An application's pending message already uses a slot's id as its message key:
// that slot is skipped (the Settle would fail on it forever), the schedule moves on.
func testSlotIDTaken(t *testing.T, e *env) {
	e.create(every("k", time.Minute, "ticks"))
	mine := mq.Message{Queue: "ticks", Key: slot("k", "10:01:00"), Payload: []byte("mine")}
	if err := e.q.Enqueue(t.Context(), mine); err != nil {
		t.Fatal(err)
	}
	s := e.scheduler(nil, schedule.SchedulerOptions{})
	e.fire(s, "10:01:00", 1)
	if ds := e.deliveries("ticks"); len(ds) != 1 || string(ds[0].Payload) != "mine" {
		t.Fatalf("ticks delivered %+v, want the application's message alone", ds)
	}
	wantTime(t, "Next", e.get("k").Next, at("10:02:00"))
	e.fire(s, "10:02:00", 1)
	e.wantFired("ticks", slot("k", "10:02:00"))
}

// settleHook is a queue whose Settle runs a hook first: what another process does
// while a Scheduler fires.
type settleHook struct {
	mq.MessageQueue
	hook func()
}

func (q *settleHook) Settle(ctx context.Context, ss ...mq.Settlement) error {
	if q.hook != nil {
		q.hook()
	}
	return q.MessageQueue.Settle(ctx, ss...)
}

func testChangeDuringFiring(t *testing.T, e *env) {
	ctx := t.Context()
	e.create(every("deleted", time.Minute, "ticks"))
	e.create(every("paused", 2*time.Minute, "ticks"))
	hooked := &settleHook{MessageQueue: e.q}
	s := e.scheduler(hooked, schedule.SchedulerOptions{})
	hooked.hook = func() {
		if err := e.m.Delete(ctx, "deleted"); err != nil {
			t.Error(err)
		}
	}
	e.fire(s, "10:01:00", 1)
	if _, err := e.m.Get(ctx, "deleted"); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("a schedule deleted while it fired: Get = %v, want ErrNotFound", err)
	}
	hooked.hook = func() {
		if _, err := e.m.Pause(ctx, "paused"); err != nil {
			t.Error(err)
		}
	}
	e.fire(s, "10:02:00", 1)
	hooked.hook = nil
	if in := e.get("paused"); !in.Paused {
		t.Fatalf("a schedule paused while it fired: %+v", in)
	}
	e.fire(s, "10:10:00", 0)
	e.wantFired("ticks")

	// The same for an orchestration: the start happened, the schedule is gone.
	st := &starter{}
	orch := e.scheduler(nil, schedule.SchedulerOptions{Starter: st})
	st.hook = func(string) error { return e.m.Delete(ctx, "orch") }
	e.create(schedule.Schedule{ID: "orch", Every: time.Minute, Orchestration: &schedule.OrchestrationTarget{Name: "Report"}})
	e.fire(orch, "10:11:00", 1)
	if _, err := e.m.Get(ctx, "orch"); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("an orchestration schedule deleted while it fired: Get = %v, want ErrNotFound", err)
	}
}

func testTwoSchedulers(t *testing.T, e *env) {
	ids := []string{"a", "b", "c", "d"}
	for _, id := range ids {
		e.create(every(id, time.Minute, "ticks"))
	}
	schedulers := []*schedule.Scheduler{e.scheduler(nil, schedule.SchedulerOptions{}), e.scheduler(e.open(), schedule.SchedulerOptions{})}
	const steps = 20
	handled := 0
	for i := 1; i <= steps; i++ {
		e.clock.Set(at("10:00:00").Add(time.Duration(i) * time.Minute))
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, s := range schedulers {
			wg.Go(func() {
				n, err := s.FireDue(t.Context())
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				handled += n
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	if handled != steps*len(ids) {
		t.Fatalf("the schedulers handled %d firings, want %d", handled, steps*len(ids))
	}
	got := e.fired("ticks")
	slices.Sort(got)
	var want []string
	for _, id := range ids {
		for i := 1; i <= steps; i++ {
			want = append(want, slot(id, fmt.Sprintf("10:%02d:00", i)))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("fired %d slots, want each of %d once: %q", len(got), len(want), got)
	}
}

func testCrashedFiring(t *testing.T, e *env) {
	ctx := t.Context()
	const lock = 10 * time.Second
	e.create(every("tick", time.Minute, "ticks"))
	survivor := e.scheduler(e.open(), schedule.SchedulerOptions{LockTimeout: lock})
	// A scheduler takes the firing of 10:01 and dies before settling it.
	e.clock.Set(at("10:01:00"))
	crashed, err := e.q.DequeueBatch(ctx, schedule.DefaultQueue, mq.DequeueOptions{LockTimeout: lock})
	if err != nil || crashed == nil {
		t.Fatalf("DequeueBatch = %v, %v", crashed, err)
	}
	e.fire(survivor, "", 0) // locked
	e.clock.Advance(lock + time.Second)
	e.fire(survivor, "", 1)
	e.wantFired("ticks", slot("tick", "10:01:00"))
	if err := e.q.Ack(ctx, crashed.Token); !errors.Is(err, mq.ErrLockLost) {
		t.Fatalf("the crashed scheduler's Ack: %v, want ErrLockLost", err)
	}
	e.fire(survivor, "10:02:00", 1)
	e.wantFired("ticks", slot("tick", "10:02:00"))

	// A scheduler stalls just before its Settle, past its lock: the other one fires
	// the slot, and the stalled Settle then enqueues nothing.
	hooked := &settleHook{MessageQueue: e.q}
	slow := e.scheduler(hooked, schedule.SchedulerOptions{LockTimeout: lock})
	var before []string // what the target queue holds before the survivor fires
	hooked.hook = func() {
		hooked.hook = nil
		before = e.fired("ticks") // so that its message key cannot hide a duplicate
		e.clock.Advance(lock + time.Second)
		e.fire(survivor, "", 1)
	}
	e.fire(slow, "10:03:00", 1)
	if got := append(before, e.fired("ticks")...); !slices.Equal(got, []string{slot("tick", "10:03:00")}) {
		t.Fatalf("a slot whose firing stalled past its lock was enqueued as %q, want once", got)
	}
	wantTime(t, "Next", e.get("tick").Next, at("10:04:00"))

	if err := e.m.Delete(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	// An orchestration scheduler stalls after starting its slot's instance, past its
	// lock: the other one fires the slot again (the same instance) and moves the
	// schedule on; the stalled one's Settle then changes nothing.
	st := &starter{}
	stalled := e.scheduler(nil, schedule.SchedulerOptions{Starter: st, LockTimeout: lock})
	other := e.scheduler(e.open(), schedule.SchedulerOptions{Starter: st, LockTimeout: lock})
	e.create(schedule.Schedule{ID: "orch", Every: time.Minute, Orchestration: &schedule.OrchestrationTarget{Name: "Report"}})
	st.hook = func(string) error {
		st.hook = nil
		e.clock.Advance(lock + time.Second)
		e.fire(other, "", 1)
		return nil
	}
	e.fire(stalled, "10:04:00", 1)
	want := slot("orch", "10:04:00")
	if got := st.started(); !slices.Equal(got, []string{want, want}) {
		t.Fatalf("started %q, want %q twice (the same instance: the runtime ignores the second start)", got, want)
	}
	in := e.get("orch")
	wantTime(t, "Next", in.Next, at("10:05:00"))
	e.fire(stalled, "10:05:00", 1)
	if got := st.started(); len(got) != 3 || got[2] != slot("orch", "10:05:00") {
		t.Fatalf("started %q", got)
	}
}
