package schedule_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/internal/processtest"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/schedule"
)

// xpChildEnv makes the test binary a second scheduler process on the storage its
// value names ("sqlite <path>" or "postgres <schema> <dsn>").
const xpChildEnv = "DUROQ_SCHEDULE_PROCESS_CHILD"

const (
	xpEvery  = time.Second
	xpLock   = time.Second
	xpTarget = "fired"
	// xpSchedules share the same slots.
	xpSchedules = 8
)

// xpRecording is a queue that reports the target messages of each Settle that
// succeeded: the slots its Scheduler fired.
type xpRecording struct {
	mq.MessageQueue
	fired func(slotID string)
}

func (q xpRecording) Settle(ctx context.Context, ss ...mq.Settlement) error {
	err := q.MessageQueue.Settle(ctx, ss...)
	if err == nil {
		for _, s := range ss {
			for _, m := range s.Then {
				if m.Queue == xpTarget {
					q.fired(m.Key)
				}
			}
		}
	}
	return err
}

func xpScheduler(t *testing.T, q mq.MessageQueue, fired func(string)) *schedule.Scheduler {
	s, err := schedule.NewScheduler(xpRecording{q, fired}, schedule.SchedulerOptions{PollWait: 20 * time.Millisecond, LockTimeout: xpLock})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Two OS processes (this test binary and a second copy of it) run Schedulers on
// one SQLite file, and on one PostgreSQL schema, while 8 interval schedules fire
// every second: together, then the second alone, then both again, then this one
// alone after the second is killed with SIGKILL (a firing it held is fired once
// its lock lapses). Every slot from the first to the last fired is delivered
// exactly once, and each was fired by one process.
func TestSchedulesAcrossProcesses(t *testing.T) {
	if location := os.Getenv(xpChildEnv); location != "" {
		xpChild(t, location)
		return
	}
	processtest.Locations(t, "schedules.db", xpRun)
}

// xpChild runs a Scheduler until killed, printing "fired <slot id>" for each slot
// it fired.
func xpChild(t *testing.T, location string) {
	q, err := processtest.Open(location)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	defer q.Close()
	var mu sync.Mutex
	s := xpScheduler(t, q, func(id string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("fired %s\n", id)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("child: %v", err)
	}
}

// firedSet is the slot ids a process fired, safe for concurrent use.
type firedSet struct {
	mu  sync.Mutex
	ids []string
}

func (f *firedSet) add(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids = append(f.ids, id)
}

func (f *firedSet) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ids)
}

func xpRun(t *testing.T, location string) {
	ctx := t.Context()
	q, err := processtest.Open(location)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	m, err := schedule.NewManager(q, schedule.ManagerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// CatchupAll: a slot that passes while both processes are slow still fires, so
	// a gap can only be a bug. The schedules share their slots: the processes race
	// for each.
	first := map[string]time.Time{}
	for i := range xpSchedules {
		id := fmt.Sprintf("xp%d", i)
		created, err := m.Create(ctx, schedule.Schedule{ID: id, Every: xpEvery, Catchup: schedule.CatchupAll,
			Enqueue: &schedule.EnqueueTarget{Queue: xpTarget}})
		if err != nil {
			t.Fatal(err)
		}
		first[id] = created.Next
	}

	// A consumer takes the slots' messages at once, so that their message keys
	// (the slot ids) cannot turn a second firing of a slot into a rejected one.
	var delivered firedSet
	consumer, err := mq.NewConsumer(q, xpTarget, mq.PerMessage(func(_ context.Context, _ *mq.Batch, d mq.Delivery) error {
		delivered.add(d.Key)
		return nil
	}), mq.ConsumerOptions{PollWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	consumeCtx, stopConsumer := context.WithCancel(ctx)
	consumed := make(chan error, 1)
	go func() { consumed <- consumer.Run(consumeCtx) }()
	defer func() { stopConsumer(); <-consumed }()

	var mine, theirs firedSet
	here := xpScheduler(t, q, mine.add)
	startHere := func() func() {
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- here.Run(runCtx) }()
		return func() {
			stop()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	stopHere := startHere()

	child := processtest.StartChild(t, "TestSchedulesAcrossProcesses", xpChildEnv, location)
	theirsFired := make(chan struct{}, 1000)
	go func() {
		for line := range child.Lines() {
			if id, ok := strings.CutPrefix(line, "fired "); ok {
				theirs.add(id)
				theirsFired <- struct{}{}
			}
		}
	}()

	time.Sleep(1500 * time.Millisecond) // both
	stopHere()
	for range 2 { // the child alone
		select {
		case <-theirsFired:
		case <-time.After(20 * time.Second):
			t.Fatalf("the child process fired nothing while it ran alone (it fired %d slots)", len(theirs.list()))
		}
	}
	stopHere = startHere()
	time.Sleep(1500 * time.Millisecond) // both again
	child.Kill()
	time.Sleep(xpLock + xpEvery) // this one alone, after a lock the child held lapsed
	stopHere()

	// Every slot of each schedule from its first to the one before its Next was
	// fired; wait for the consumer to have taken them all.
	var want []string
	for id, from := range first {
		info, err := m.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Firing {
			t.Fatalf("schedule %s is still being fired: %+v", id, info)
		}
		for s := from; s.Before(info.Next); s = s.Add(xpEvery) {
			want = append(want, schedule.SlotID(id, s))
		}
	}
	slices.Sort(want)
	deadline := time.Now().Add(10 * time.Second)
	for len(delivered.list()) < len(want) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	got := delivered.list()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %d slot messages, want each of the %d slots once:\ngot  %q\nwant %q", len(got), len(want), got, want)
	}
	a, b := mine.list(), theirs.list()
	for _, id := range a {
		if slices.Contains(b, id) {
			t.Fatalf("slot %s was fired by both processes", id)
		}
	}
	// The child may have been killed between a Settle and its report of it: the
	// Scheduler settles one firing at a time.
	if unreported := len(want) - len(a) - len(b); len(a) == 0 || len(b) == 0 || unreported < 0 || unreported > 1 {
		t.Fatalf("%d slots: this process reported %d, the child %d", len(want), len(a), len(b))
	}
	t.Logf("%d slots fired exactly once: %d by this process, %d by the child", len(want), len(a), len(b))
}
