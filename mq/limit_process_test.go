package mq_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/internal/processtest"
	"github.com/duroq/duroq/mq"
)

// limitChildEnv makes the test binary a second consumer process on the storage its
// value names ("sqlite <path>" or "postgres <schema> <dsn>").
const limitChildEnv = "DUROQ_LIMIT_PROCESS_CHILD"

const (
	limitQueue    = "limited"
	limitInFlight = 4 // the queue's limit
	limitGroupMax = 1 // group g's
	limitMessages = 60
	limitWork     = 15 * time.Millisecond // each handler's time
	// limitWorkers is each process's handlers: fewer than the limit, so that
	// neither process can hold every place (a process's own acks wake its waiters
	// first), and more than half of it, so that the two together would exceed it.
	limitWorkers = 3
)

// span is one handler run: which message, in which group, from when to when (Unix
// nanoseconds of this machine's clock, which both processes share).
type span struct {
	payload, group string
	start, end     int64
}

func (s span) String() string {
	return fmt.Sprintf("span %s %q %d %d", s.payload, s.group, s.start, s.end)
}

func parseSpan(line string) (span, bool) {
	var s span
	var group string
	if _, err := fmt.Sscanf(line, "span %s %q %d %d", &s.payload, &group, &s.start, &s.end); err != nil {
		return span{}, false
	}
	s.group = group
	return s, true
}

// limitConsumer runs limitWorkers handlers on q, reporting each run to record.
func limitConsumer(q mq.MessageQueue, record func(span)) (*mq.Consumer, error) {
	return mq.NewConsumer(q, limitQueue, mq.PerMessage(func(_ context.Context, _ *mq.Batch, d mq.Delivery) error {
		start := time.Now().UnixNano()
		time.Sleep(limitWork) // the handler's work: the batch stays in flight meanwhile
		record(span{payload: string(d.Payload), group: d.LimitGroup, start: start, end: time.Now().UnixNano()})
		return nil
	}), mq.ConsumerOptions{Concurrency: limitWorkers, PollWait: time.Second})
}

// Two OS processes (this test binary and a second copy of it) consume one queue
// on one SQLite file, and on one PostgreSQL schema, each with 3 handlers, under a
// limit of 4 batches in flight for the queue and 1 for group g (half of the 60
// messages). Every message is handled once; at no instant do more than 4 handlers
// run in the two processes together, nor more than 1 of group g; both processes
// handle messages.
func TestLimitsHoldAcrossProcesses(t *testing.T) {
	if location := os.Getenv(limitChildEnv); location != "" {
		limitChild(t, location)
		return
	}
	processtest.Locations(t, "limits.db", limitRun)
}

// limitChild consumes until killed, printing a line per handler run.
func limitChild(t *testing.T, location string) {
	q, err := processtest.Open(location)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	defer q.Close()
	var mu sync.Mutex
	c, err := limitConsumer(q, func(s span) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Println(s)
	})
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	fmt.Println("ready")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("child: %v", err)
	}
}

func limitRun(t *testing.T, location string) {
	ctx := t.Context()
	q, err := processtest.Open(location)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	admin := q.(mq.Admin)
	if err := admin.SetLimit(ctx, limitQueue, "", mq.Limit{MaxInFlight: limitInFlight}); err != nil {
		t.Fatal(err)
	}
	if err := admin.SetLimit(ctx, limitQueue, "g", mq.Limit{MaxInFlight: limitGroupMax}); err != nil {
		t.Fatal(err)
	}

	var (
		mu     sync.Mutex
		spans  = map[string][]span{} // by process
		handed = make(chan struct{}, 2*limitMessages)
	)
	record := func(process string) func(span) {
		return func(s span) {
			mu.Lock()
			spans[process] = append(spans[process], s)
			mu.Unlock()
			handed <- struct{}{}
		}
	}

	child := processtest.StartChild(t, "TestLimitsHoldAcrossProcesses", limitChildEnv, location)
	ready := make(chan struct{})
	go func() {
		for line := range child.Lines() {
			if line == "ready" {
				close(ready)
			}
			if s, ok := parseSpan(line); ok {
				record("child")(s)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(time.Minute):
		t.Fatal("the child process did not start its consumer within a minute")
	}

	c, err := limitConsumer(q, record("parent"))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { stop(); <-done }()

	var msgs []mq.Message
	for i := range limitMessages {
		m := mq.Message{Queue: limitQueue, Payload: []byte("m" + strconv.Itoa(i))}
		if i%2 == 0 {
			m.LimitGroup = "g"
		}
		msgs = append(msgs, m)
	}
	started := time.Now()
	if err := q.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	for range limitMessages {
		select {
		case <-handed:
		case <-time.After(time.Minute):
			t.Fatal("the messages were not all handled within a minute")
		}
	}
	took := time.Since(started)

	mu.Lock()
	defer mu.Unlock()
	var all []span
	seen := map[string]bool{}
	for process, ss := range spans {
		if len(ss) == 0 {
			t.Errorf("process %s handled no message: the test proves nothing across processes", process)
		}
		for _, s := range ss {
			if seen[s.payload] {
				t.Errorf("message %s was handled twice", s.payload)
			}
			seen[s.payload] = true
		}
		all = append(all, ss...)
	}
	if len(spans) != 2 {
		t.Errorf("handler runs came from %d processes, want 2: %v", len(spans), slices.Collect(maps.Keys(spans)))
	}
	if most := overlap(all, ""); most > limitInFlight {
		t.Errorf("%d handlers ran at once in the two processes; the queue's limit is %d batches in flight", most, limitInFlight)
	} else if most < limitInFlight {
		t.Logf("at most %d handlers ran at once (limit %d)", most, limitInFlight)
	}
	if most := overlap(all, "g"); most > limitGroupMax {
		t.Errorf("%d handlers of group g ran at once in the two processes; its limit is %d", most, limitGroupMax)
	}
	t.Logf("%d messages in %v: parent %d, child %d", limitMessages, took.Round(time.Millisecond), len(spans["parent"]), len(spans["child"]))
}

// overlap is the most spans of group (all groups if "") that were running at one
// instant.
func overlap(spans []span, group string) int {
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, s := range spans {
		if group == "" || s.group == group {
			edges = append(edges, edge{s.start, 1}, edge{s.end, -1})
		}
	}
	// An end before a start at the same instant: touching runs do not overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta))
	})
	most, now := 0, 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	return most
}
