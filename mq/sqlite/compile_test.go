package sqlite_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/duroq/duroq/internal/sqliteconn/sqliteconntest"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/sqlite"
)

// TestHotStatementsAreCompiledOnce runs the queue's operations round after round,
// the same statements with other values each time, and checks that after the
// first round SQLite compiles nothing: a statement whose plan looked at a
// parameter would be recompiled at every run, which costs more than running it
// (see internal/sqliteconn). The rounds cover un-keyed, keyed, prioritized and
// limited messages, sessions, tag and attribute filters, multi-batch fetches, partial settlement, dead letters,
// abandon, renew, peek and empty polls.
func TestHotStatementsAreCompiledOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	compiles := sqliteconntest.CountCompiles(t, path)
	q, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := t.Context()
	if err := q.SetLimit(ctx, "limited", "g", mq.Limit{MaxInFlight: 2, Rate: 1000, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	opts := mq.DequeueOptions{LockTimeout: time.Minute}
	compiles.Rounds(3, func(round int, do func(string, func() error)) {
		var b *mq.Batch
		var bs []*mq.Batch
		dequeue := func(queue string, o mq.DequeueOptions) func() error {
			return func() (err error) {
				if b, err = q.DequeueBatch(ctx, queue, o); err == nil && b == nil {
					err = fmt.Errorf("no batch")
				}
				return err
			}
		}
		ack := func() error { return q.Ack(ctx, b.Token) }
		payload := []byte(fmt.Sprint("round ", round))

		do("enqueue", func() error { return q.Enqueue(ctx, mq.Message{Queue: "q", Payload: payload}) })
		do("enqueue many", func() error {
			return q.Enqueue(ctx, mq.Message{Queue: "q", Payload: payload}, mq.Message{Queue: "q", Payload: payload},
				mq.Message{Queue: "q", RoutingKey: "k", Payload: payload}, mq.Message{Queue: "q", RoutingKey: "k", Payload: payload},
				mq.Message{Queue: "q", RoutingKey: "k", Payload: payload}, mq.Message{Queue: "q", RoutingKey: "k", Payload: payload})
		})
		do("dequeue", dequeue("q", opts))
		do("ack", ack)
		do("dequeue many", func() (err error) {
			bs, err = q.DequeueBatches(ctx, "q", mq.DequeueOptions{LockTimeout: time.Minute, MaxMessages: 2}, 3)
			return err
		})
		if len(bs) != 3 || bs[0].RoutingKey != "" || bs[1].RoutingKey != "" || bs[2].RoutingKey != "k" || len(bs[2].Messages) != 2 {
			t.Fatalf("round %d: dequeue many returned %d batches, want two un-keyed and two messages of k", round, len(bs))
		}
		do("renew", func() error { _, err := q.Renew(ctx, bs[0].Token, time.Minute); return err })
		do("lock", func() error { _, err := q.Lock(ctx, bs[0].Token); return err })
		do("abandon", func() error { return q.Abandon(ctx, bs[0].Token, mq.AbandonOptions{IgnoreAttempt: true}) })
		do("settle", func() error {
			return q.Settle(ctx, mq.Settlement{Token: bs[1].Token, Acked: 1},
				mq.Settlement{Token: bs[2].Token, Acked: 1, DeadLettered: 1, DeadLetterQueue: "dlq", Reason: "bad"})
		})
		do("dequeue abandoned", dequeue("q", opts))
		do("ack", ack)
		do("dequeue key", dequeue("q", opts))
		do("ack", ack)
		do("peek", func() error { _, err := q.Peek(ctx, "dlq", mq.PeekOptions{}); return err })
		do("stats", func() error { _, err := q.Stats(ctx, "q"); return err })
		do("redrive", func() error { _, err := q.Redrive(ctx, "dlq", mq.RedriveOptions{}); return err })
		do("dequeue redriven", dequeue("q", opts))
		do("ack", ack)

		do("enqueue prioritized", func() error {
			return q.Enqueue(ctx, mq.Message{Queue: "p", Payload: payload, Priority: -1}, mq.Message{Queue: "p", Payload: payload},
				mq.Message{Queue: "p", Payload: payload, Priority: 1})
		})
		for i := range 3 {
			do(fmt.Sprint("dequeue prioritized ", i), dequeue("p", opts))
			do("ack", ack)
		}

		do("enqueue limited", func() error {
			return q.Enqueue(ctx, mq.Message{Queue: "limited", Payload: payload, LimitGroup: "g"}, mq.Message{Queue: "limited", Payload: payload})
		})
		for i := range 2 {
			do(fmt.Sprint("dequeue limited ", i), dequeue("limited", opts))
			do("ack", ack)
		}
		do("enqueue session", func() error {
			return q.Enqueue(ctx, mq.Message{Queue: "s", Payload: payload, Session: "s1", Tag: "t"}, mq.Message{Queue: "s", RoutingKey: "k", Payload: payload})
		})
		filtered := mq.DequeueOptions{LockTimeout: time.Minute, Tags: mq.TagFilter{Mode: mq.TagDefaultAnd, Tags: []string{"t"}},
			Session: &mq.SessionOptions{Owner: "me", LeaseTimeout: time.Minute}, KeyAttr: &mq.AttrFilter{Ranges: []mq.AttrRange{{Min: 0, Max: 10}}}}
		for i := range 2 {
			do(fmt.Sprint("dequeue filtered ", i), dequeue("s", filtered))
			do("ack", ack)
		}
		for _, queue := range []string{"q", "p", "limited", "s"} {
			do("empty dequeue of "+queue, func() (err error) {
				if b, err = q.DequeueBatch(ctx, queue, opts); b != nil {
					err = fmt.Errorf("queue %s not empty", queue)
				}
				return err
			})
		}
	})
}
