package schedule_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/schedule"
)

func TestCreateRejectsBadInput(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	enq := &schedule.EnqueueTarget{Queue: "ticks"}
	orch := &schedule.OrchestrationTarget{Name: "Report"}
	ok := func(edit func(s *schedule.Schedule)) schedule.Schedule {
		s := schedule.Schedule{ID: "s", Every: time.Minute, Enqueue: enq}
		edit(&s)
		return s
	}
	cron := func(spec string) func(s *schedule.Schedule) {
		return func(s *schedule.Schedule) { s.Every, s.Cron = 0, spec }
	}
	for _, c := range []struct {
		name  string
		s     schedule.Schedule
		field string
	}{
		{"empty id", ok(func(s *schedule.Schedule) { s.ID = "" }), "ID"},
		{"huge id", ok(func(s *schedule.Schedule) { s.ID = huge }), "ID"},
		{"id with a newline", ok(func(s *schedule.Schedule) { s.ID = "a\nb" }), "ID"},
		{"no cron nor every", ok(func(s *schedule.Schedule) { s.Every = 0 }), "Cron"},
		{"cron and every", ok(func(s *schedule.Schedule) { s.Cron = "* * * * *" }), "Every"},
		{"bad cron", ok(cron("61 * * * *")), "Cron"},
		{"huge cron", ok(cron(huge)), "Cron"},
		{"zone in the cron", ok(cron("CRON_TZ=Europe/Paris 0 9 * * *")), "Cron"},
		{"@every", ok(cron("@every 5m")), "Cron"},
		{"never", ok(cron("0 0 30 2 *")), "Cron"},
		{"unknown zone", ok(func(s *schedule.Schedule) { cron("@daily")(s); s.TimeZone = "Mars/Olympus_Mons" }), "TimeZone"},
		{"Local zone", ok(func(s *schedule.Schedule) { cron("@daily")(s); s.TimeZone = "Local" }), "TimeZone"},
		{"huge zone", ok(func(s *schedule.Schedule) { cron("@daily")(s); s.TimeZone = huge }), "TimeZone"},
		{"zone with every", ok(func(s *schedule.Schedule) { s.TimeZone = "UTC" }), "TimeZone"},
		{"anchor with cron", ok(func(s *schedule.Schedule) { cron("@daily")(s); s.Anchor = time.Now() }), "Anchor"},
		{"anchor too old", ok(func(s *schedule.Schedule) { s.Anchor = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC) }), "Anchor"},
		{"tiny every", ok(func(s *schedule.Schedule) { s.Every = time.Millisecond }), "Every"},
		{"negative every", ok(func(s *schedule.Schedule) { s.Every = -time.Hour }), "Every"},
		{"fractional every", ok(func(s *schedule.Schedule) { s.Every = 1500 * time.Millisecond }), "Every"},
		{"fractional anchor", ok(func(s *schedule.Schedule) { s.Anchor = time.Date(2026, 1, 1, 0, 0, 0, 1, time.UTC) }), "Anchor"},
		{"negative jitter", ok(func(s *schedule.Schedule) { s.Jitter = -time.Second }), "Jitter"},
		{"jitter of the interval", ok(func(s *schedule.Schedule) { s.Jitter = time.Minute }), "Jitter"},
		{"huge jitter", ok(func(s *schedule.Schedule) { cron("@daily")(s); s.Jitter = 25 * time.Hour }), "Jitter"},
		{"negative window", ok(func(s *schedule.Schedule) { s.CatchupWindow = -time.Second }), "CatchupWindow"},
		{"unknown catch-up", ok(func(s *schedule.Schedule) { s.Catchup = "sometimes" }), "Catchup"},
		{"huge catch-up", ok(func(s *schedule.Schedule) { s.MaxCatchup = schedule.MaxCatchupLimit + 1 }), "MaxCatchup"},
		{"negative catch-up", ok(func(s *schedule.Schedule) { s.MaxCatchup = -1 }), "MaxCatchup"},
		{"unknown overlap", ok(func(s *schedule.Schedule) { s.Overlap = "never"; s.Enqueue, s.Orchestration = nil, orch }), "Overlap"},
		{"overlap of a queue target", ok(func(s *schedule.Schedule) { s.Overlap = schedule.OverlapSkip }), "Overlap"},
		{"no target", ok(func(s *schedule.Schedule) { s.Enqueue = nil }), "Enqueue"},
		{"two targets", ok(func(s *schedule.Schedule) { s.Orchestration = orch }), "Orchestration"},
		{"no queue", ok(func(s *schedule.Schedule) { s.Enqueue = &schedule.EnqueueTarget{} }), "Enqueue"},
		{"huge routing key", ok(func(s *schedule.Schedule) { s.Enqueue = &schedule.EnqueueTarget{Queue: "q", RoutingKey: huge} }), "Enqueue"},
		{"the schedules' queue", ok(func(s *schedule.Schedule) { s.Enqueue = &schedule.EnqueueTarget{Queue: schedule.DefaultQueue} }), "Enqueue.Queue"},
		{"huge payload", ok(func(s *schedule.Schedule) {
			s.Enqueue = &schedule.EnqueueTarget{Queue: "q", Payload: []byte(huge + "!")}
		}), "Enqueue.Payload"},
		{"no orchestration name", ok(func(s *schedule.Schedule) { s.Enqueue, s.Orchestration = nil, &schedule.OrchestrationTarget{} }), "Orchestration.Name"},
		{"huge input", ok(func(s *schedule.Schedule) {
			s.Enqueue, s.Orchestration = nil, &schedule.OrchestrationTarget{Name: "R", Input: huge + "!"}
		}), "Orchestration.Input"},
	} {
		m, err := schedule.NewManager(mq.NewMemory(mq.MemoryOptions{}), schedule.ManagerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Create(t.Context(), c.s)
		var ie *schedule.InvalidError
		if !errors.Is(err, schedule.ErrInvalid) || !errors.As(err, &ie) || ie.Field != c.field || ie.Op != "create" {
			t.Errorf("%s: Create: %v; want an InvalidError of create on field %s", c.name, err, c.field)
			continue
		}
		if len(err.Error()) > 700 {
			t.Errorf("%s: a %d-byte error: %.300s...", c.name, len(err.Error()), err)
		}
		if st, _ := m.List(t.Context(), schedule.ListOptions{}); len(st.Schedules) != 0 {
			t.Errorf("%s: a rejected schedule was stored", c.name)
		}
	}
}

func TestBadIDsAndOptions(t *testing.T) {
	q := mq.NewMemory(mq.MemoryOptions{})
	m, err := schedule.NewManager(q, schedule.ManagerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", strings.Repeat("i", schedule.MaxIDSize+1)} {
		_, errGet := m.Get(t.Context(), id)
		_, errPause := m.Pause(t.Context(), id)
		for _, err := range []error{errGet, errPause, m.Delete(t.Context(), id)} {
			if !errors.Is(err, schedule.ErrInvalid) || len(err.Error()) > 400 {
				t.Errorf("id of %d bytes: %v, want a short ErrInvalid", len(id), err)
			}
		}
	}
	type plainQueue struct{ mq.MessageQueue }
	if _, err := schedule.NewManager(plainQueue{q}, schedule.ManagerOptions{}); !errors.Is(err, schedule.ErrInvalid) {
		t.Errorf("NewManager of a queue without transactions: %v", err)
	}
	if _, err := schedule.NewManager(q, schedule.ManagerOptions{Queue: "bad\x00queue"}); !errors.Is(err, schedule.ErrInvalid) {
		t.Errorf("NewManager with a bad queue name: %v", err)
	}
	for _, o := range []schedule.SchedulerOptions{{LockTimeout: -1}, {PollWait: -1}, {Queue: strings.Repeat("q", mq.MaxNameSize+1)}} {
		if _, err := schedule.NewScheduler(q, o); !errors.Is(err, schedule.ErrInvalid) {
			t.Errorf("NewScheduler(%+v): %v", o, err)
		}
	}
	if _, err := schedule.NewScheduler(nil, schedule.SchedulerOptions{}); !errors.Is(err, schedule.ErrInvalid) {
		t.Errorf("NewScheduler(nil): %v", err)
	}
}
