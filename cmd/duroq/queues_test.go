package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/sqliteprovider"
)

const declined = "card declined: insufficient funds"

// fillQueues stores, through p's queue, the messages the tests look at, then closes
// p. The queue "orders" holds, in id order: two un-keyed messages (the first locked
// by a consumer, the second a binary payload), three of key cust-a, one of key
// cust-b and a message delayed by an hour. The queue "payments.dead" holds two dead
// letters of "payments" (one of key p1, one un-keyed), which a consumer whose
// handler fails put there. It returns the id of the locked message.
func fillQueues(t *testing.T, p *adapter.Provider) (locked int64) {
	t.Helper()
	defer p.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	q := p.Queue()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(q.Enqueue(ctx,
		mq.Message{Queue: "orders", Payload: []byte("plain text")},
		mq.Message{Queue: "orders", Payload: []byte{0xff, 0x00, 0x01}},
		mq.Message{Queue: "orders", RoutingKey: "cust-a", Payload: []byte("a1")},
		mq.Message{Queue: "orders", RoutingKey: "cust-a", Payload: []byte("a2")},
		mq.Message{Queue: "orders", RoutingKey: "cust-a", Payload: []byte("a3")},
		mq.Message{Queue: "orders", RoutingKey: "cust-b", Payload: []byte("b1"), Tag: "gpu"},
		mq.Message{Queue: "orders", Payload: []byte("later"), Delay: time.Hour, Priority: -3},
	))
	b, err := q.DequeueBatch(ctx, "orders", mq.DequeueOptions{LockTimeout: time.Hour})
	must(err)
	if b == nil || len(b.Messages) != 1 || string(b.Messages[0].Payload) != "plain text" {
		t.Fatalf("DequeueBatch = %+v; want the first message", b)
	}

	deadLetter(t, q, mq.Message{Queue: "payments", RoutingKey: "p1", Payload: []byte("pay-1")},
		mq.Message{Queue: "payments", Payload: []byte("pay-2")})
	return b.Messages[0].ID
}

// deadLetter enqueues messages (all of the queue "payments") and has a consumer
// whose handler fails, declined, move them to "payments.dead".
func deadLetter(t *testing.T, q mq.MessageQueue, messages ...mq.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := q.Enqueue(ctx, messages...); err != nil {
		t.Fatal(err)
	}
	dead := make(chan struct{}, len(messages))
	c, err := mq.NewConsumer(q, "payments", func(context.Context, *mq.Batch) error { return errors.New(declined) },
		mq.ConsumerOptions{MaxAttempts: 1, PollWait: 50 * time.Millisecond, ShutdownGrace: time.Second,
			OnDeadLetter: func(*mq.Batch, mq.Delivery, error) { dead <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	for range messages {
		select {
		case <-dead:
		case <-ctx.Done():
			t.Fatalf("the consumer did not dead-letter the %d payments in time", len(messages))
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// qcli runs `duroq queues` on one database.
type qcli struct {
	t  *testing.T
	db []string // the -db (and -schema) flags
}

func (c *qcli) try(args ...string) (string, string, error) {
	var stderr bytes.Buffer
	out, err := c.exec(c.t.Context(), &stderr, args...)
	return out, stderr.String(), err
}

// exec runs `duroq queues <sub> <db flags> args...` until ctx ends, writing its usage
// and progress to stderr.
func (c *qcli) exec(ctx context.Context, stderr io.Writer, args ...string) (string, error) {
	var out bytes.Buffer
	err := queuesGroup.runContext(ctx, slices.Concat(args[:1], c.db, args[1:]), &out, stderr)
	return out.String(), err
}

func (c *qcli) run(args ...string) string {
	c.t.Helper()
	out, _, err := c.try(args...)
	if err != nil {
		c.t.Fatalf("duroq queues %q: %v", args, err)
	}
	return out
}

func (c *qcli) decode(v any, args ...string) {
	c.t.Helper()
	out := c.run(append(args, "-json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("duroq queues %q -json printed %q: %v", args, out, err)
	}
}

// peeked is what peek and dead-letters print with -json.
type peeked struct {
	Messages []mq.MessageInfo `json:"messages"`
	Next     string           `json:"next"`
}

// listedQueues is what list prints: for each queue, the columns after its name.
func (c *qcli) listedQueues() map[string][]string {
	c.t.Helper()
	out := c.run("list")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if !strings.HasPrefix(lines[0], "QUEUE ") || !strings.Contains(lines[0], "MAX ATTEMPT") {
		c.t.Fatalf("list printed no header:\n%s", out)
	}
	qs := map[string][]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		qs[f[0]] = f[1:]
	}
	return qs
}

// stats returns `stats queue args...` with -json.
func (c *qcli) stats(queue string, args ...string) queueStatsJSON {
	c.t.Helper()
	var v queueStatsJSON
	c.decode(&v, append([]string{"stats", queue}, args...)...)
	return v
}

// pages follows the pages of `peek queue -limit n` as a person would: the table's
// first column, and the -after value the last line tells.
func (c *qcli) pages(queue string, n int) (ids []int64, pages int) {
	c.t.Helper()
	for after := ""; pages < 100; {
		out := c.run("peek", queue, "-limit", strconv.Itoa(n), "-after", after)
		pages++
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if strings.Contains(lines[0], "holds no messages") {
			return ids, pages
		}
		if !strings.HasPrefix(lines[0], "ID ") {
			c.t.Fatalf("peek printed no header:\n%s", out)
		}
		after = ""
		for _, l := range lines[1:] {
			if a, ok := strings.CutPrefix(l, "more messages may follow: peek at the next page with -after "); ok {
				after = a
				break
			}
			id, err := strconv.ParseInt(strings.Fields(l)[0], 10, 64)
			if err != nil {
				c.t.Fatalf("peek printed %q:\n%s", l, out)
			}
			ids = append(ids, id)
		}
		if after == "" {
			return ids, pages
		}
	}
	c.t.Fatal("peek kept telling of a next page")
	return nil, 0
}

// TestQueuesCommand: `duroq queues` on a SQLite file and on PostgreSQL holding
// ready, keyed, delayed, locked and dead-lettered messages.
func TestQueuesCommand(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "app.db")
		p, err := sqliteprovider.Open(path, sqliteprovider.Options{})
		if err != nil {
			t.Fatal(err)
		}
		locked := fillQueues(t, p)
		queuesScenario(t, &qcli{t: t, db: []string{"-db", path}}, locked)
	})
	t.Run("postgres", func(t *testing.T) {
		dsn, schema := pgtest.Schema(t) // skips, saying "PostgreSQL tests skipped", without DUROQ_POSTGRES_DSN
		p, err := pgprovider.Open(t.Context(), dsn, pgprovider.Options{DB: pgdb.Options{Schema: schema}})
		if err != nil {
			t.Fatal(err)
		}
		locked := fillQueues(t, p)
		queuesScenario(t, &qcli{t: t, db: []string{"-db", dsn, "-schema", schema}}, locked)
	})
}

func queuesScenario(t *testing.T, c *qcli, locked int64) {
	var all peeked
	c.decode(&all, "peek", "orders")
	if len(all.Messages) != 7 || all.Next != "" {
		t.Fatalf("peek orders -json = %+v; want the 7 messages and no next page", all)
	}
	ids := make([]int64, len(all.Messages))
	for i, m := range all.Messages {
		ids[i] = m.ID
	}
	t.Run("list and stats", func(t *testing.T) {
		c.t = t
		qs := c.listedQueues()
		if len(qs) != 2 || !slices.Equal(qs["orders"][:4], []string{"5", "1", "1", "1"}) || len(qs["orders"]) != 6 || qs["orders"][4] == "-" ||
			qs["orders"][5] != "no" || !slices.Equal(qs["payments.dead"], []string{"2", "0", "0", "1", "-", "no"}) {
			t.Fatalf("list = %q; want orders 5 ready, 1 delayed, 1 locked, max attempt 1, and payments.dead 2 ready", qs)
		}
		var l struct{ Queues []queueStatsJSON }
		c.decode(&l, "list")
		if len(l.Queues) != 2 || l.Queues[0].Queue != "orders" || l.Queues[0].NextVisible.Before(time.Now().Add(50*time.Minute)) {
			t.Fatalf("list -json = %+v", l)
		}
		if st := c.stats("orders"); st.Ready != 5 || st.Delayed != 1 || st.Locked != 1 || st.MaxAttempt != 1 || st.NextVisible.IsZero() || st.Paused {
			t.Fatalf("stats orders = %+v", st)
		}
		if st := c.stats("orders", "-key", "cust-a"); st.Ready != 3 || st.Delayed+st.Locked+st.MaxAttempt != 0 || st.Key != "cust-a" {
			t.Fatalf("stats orders -key cust-a = %+v", st)
		}
		out := c.run("stats", "-key", "cust-b", "orders") // flags before the argument too
		for _, want := range []string{"Queue:", "orders", "Key:", "cust-b", "Ready:", "1", "Next visible:", "Paused:"} {
			if !strings.Contains(out, want) {
				t.Fatalf("stats orders -key cust-b printed:\n%s", out)
			}
		}
	})
	t.Run("peek", func(t *testing.T) {
		c.t = t
		if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != 7 {
			t.Fatalf("peek ids %v are not in id order", ids)
		}
		for _, m := range all.Messages {
			if m.Queue != "orders" || m.EnqueuedAt.IsZero() || (m.ID == locked) != m.Locked || (m.ID == locked) != (m.Attempt == 1) {
				t.Errorf("peeked %+v", m)
			}
		}
		if p := all.Messages; string(p[0].Payload) != "plain text" || !bytes.Equal(p[1].Payload, []byte{0xff, 0, 1}) ||
			p[2].RoutingKey != "cust-a" || p[5].Tag != "gpu" || !p[6].VisibleAt.After(time.Now().Add(50*time.Minute)) || p[6].Priority != -3 {
			t.Errorf("peeked %+v", p)
		}
		for _, n := range []int{1, 3, 7, 100} {
			got, pages := c.pages("orders", n)
			if want := 7/n + 1; !slices.Equal(got, ids) || pages != want {
				t.Errorf("pages of %d peeked %v in %d pages; want %v in %d", n, got, pages, ids, want)
			}
		}
		var seen []int64
		for after, i := "", 0; i < 10; i++ {
			var p peeked
			c.decode(&p, "peek", "orders", "-limit", "2", "-after", after)
			for _, m := range p.Messages {
				seen = append(seen, m.ID)
			}
			if after = p.Next; after == "" {
				break
			}
		}
		if !slices.Equal(seen, ids) {
			t.Errorf("JSON pages of 2 peeked %v; want %v", seen, ids)
		}
		for state, want := range map[string][]int64{"locked": {locked}, "delayed": {ids[6]}, "ready": ids[1:6]} {
			var p peeked
			c.decode(&p, "peek", "orders", "-state", state)
			var got []int64
			for _, m := range p.Messages {
				got = append(got, m.ID)
			}
			if !slices.Equal(got, want) {
				t.Errorf("peek -state %s: %v, want %v", state, got, want)
			}
		}
		var keyed peeked
		c.decode(&keyed, "peek", "orders", "-key", "cust-a")
		if len(keyed.Messages) != 3 || keyed.Messages[0].ID != ids[2] || string(keyed.Messages[2].Payload) != "a3" {
			t.Errorf("peek -key cust-a = %+v", keyed)
		}
		out := c.run("peek", "orders")
		if strings.Contains(out, "plain text") || strings.Contains(out, "LAST ERROR") || !strings.Contains(out, "gpu") ||
			!strings.HasPrefix(strings.Join(strings.Fields(out), " "), "ID KEY ATTEMPT ENQUEUED VISIBLE LOCKED TAG PRIORITY "+strconv.FormatInt(ids[0], 10)+" ") ||
			!strings.HasSuffix(strings.Join(strings.Fields(out), " "), " -3") {
			t.Errorf("peek orders printed:\n%s", out)
		}
		// The priority column shows only on a page that holds a message with one.
		if out := c.run("peek", "orders", "-state", "ready"); strings.Contains(out, "PRIORITY") {
			t.Errorf("peek orders -state ready, of default priorities only, printed:\n%s", out)
		}
		out = c.run("peek", "orders", "-payload")
		if !strings.Contains(out, "plain text") || !strings.Contains(out, "0xff0001") || !strings.Contains(out, "PAYLOAD") {
			t.Errorf("peek orders -payload printed:\n%s", out)
		}
		if out := c.run("peek", "nothing-here"); out != "queue nothing-here holds no messages\n" {
			t.Errorf("peek of an empty queue printed %q", out)
		}
	})
	t.Run("dead letters and redrive", func(t *testing.T) {
		c.t = t
		var dl peeked
		c.decode(&dl, "dead-letters", "payments.dead")
		if len(dl.Messages) != 2 {
			t.Fatalf("dead-letters -json = %+v", dl)
		}
		for _, m := range dl.Messages {
			if m.OriginQueue != "payments" || m.LastError != declined || m.Attempt != 1 || m.DeadLetteredAt.IsZero() || m.LastFailedAt.IsZero() {
				t.Errorf("dead letter %+v", m)
			}
		}
		for _, sub := range []string{"dead-letters", "peek"} {
			out := c.run(sub, "payments.dead")
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 3 || !strings.Contains(lines[0], "ORIGIN") || !strings.HasSuffix(lines[0], "LAST ERROR") ||
				!strings.Contains(lines[1], "payments ") || !strings.HasSuffix(lines[2], declined) {
				t.Errorf("%s payments.dead printed:\n%s", sub, out)
			}
		}
		first := strconv.FormatInt(dl.Messages[0].ID, 10)
		if out := c.run("redrive", "payments.dead", "-id", first, "-to", "review"); out != "moved 1 message from payments.dead to review\n" {
			t.Errorf("redrive -id -to printed %q", out)
		}
		if out := c.run("redrive", "payments.dead"); out != "moved 1 message from payments.dead to the queue each came from\n" {
			t.Errorf("redrive printed %q", out)
		}
		var moved map[string]any
		c.decode(&moved, "redrive", "payments.dead")
		if moved["moved"] != 0.0 {
			t.Errorf("a second redrive -json printed %v", moved)
		}
		qs := c.listedQueues()
		if _, ok := qs["payments.dead"]; ok || !slices.Equal(qs["payments"], []string{"1", "0", "0", "0", "-", "no"}) ||
			!slices.Equal(qs["review"], []string{"1", "0", "0", "0", "-", "no"}) {
			t.Errorf("list after the redrives = %q", qs)
		}
		if st := c.stats("payments"); st.Ready != 1 || st.MaxAttempt != 0 {
			t.Errorf("stats payments after the redrive = %+v", st)
		}
		var back peeked
		c.decode(&back, "peek", "payments")
		if len(back.Messages) != 1 || back.Messages[0].ID != dl.Messages[1].ID || back.Messages[0].LastError != declined {
			t.Errorf("peek payments after the redrive = %+v", back)
		}
	})
	t.Run("purge", func(t *testing.T) {
		c.t = t
		out, stderr, err := c.try("purge", "orders", "-key", "cust-a")
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), `all 3 messages of key "cust-a" in queue "orders"`) ||
			!strings.Contains(err.Error(), "-yes") || out != "" || !strings.Contains(stderr, "usage: duroq queues purge") {
			t.Fatalf("purge without -yes = %v (exit %d), printed %q", err, exitCode(err), out)
		}
		if _, _, err := c.try("purge", "orders"); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "all 7 messages") ||
			!strings.Contains(err.Error(), "1 of them locked") {
			t.Fatalf("purge orders without -yes = %v", err)
		}
		if st := c.stats("orders"); st.Ready+st.Delayed+st.Locked != 7 {
			t.Fatalf("purge without -yes deleted messages: %+v", st)
		}
		if out := c.run("purge", "orders", "-key", "cust-a", "-yes"); out != "deleted 3 messages from orders\n" {
			t.Errorf("purge -key -yes printed %q", out)
		}
		if out := c.run("purge", "orders", "-id", strconv.FormatInt(ids[1], 10), "-id", strconv.FormatInt(ids[5], 10), "-yes"); out != "deleted 2 messages from orders\n" {
			t.Errorf("purge -id -id -yes printed %q", out)
		}
		var left peeked
		c.decode(&left, "peek", "orders")
		if len(left.Messages) != 2 || left.Messages[0].ID != locked || left.Messages[1].ID != ids[6] {
			t.Errorf("orders after the purges = %+v", left)
		}
		var purged map[string]any
		c.decode(&purged, "purge", "orders", "-yes")
		if purged["deleted"] != 2.0 || purged["queue"] != "orders" {
			t.Errorf("purge orders -yes -json printed %v", purged)
		}
		c.run("purge", "review", "-yes")
		if qs := c.listedQueues(); len(qs) != 1 || qs["payments"] == nil {
			t.Errorf("list after the purges = %q", qs)
		}
	})
}

// TestQueuesRedrivePageByPage: redrive moves the dead letters a page (a transaction)
// at a time, telling its progress on stderr, and stops between pages when
// interrupted, saying how far it went.
func TestQueuesRedrivePageByPage(t *testing.T) {
	onEachBackend(t, func(t *testing.T, p *adapter.Provider, dbArgs []string) {
		var payments []mq.Message
		for i := range 5 {
			payments = append(payments, mq.Message{Queue: "payments", Payload: []byte("pay-" + strconv.Itoa(i))})
		}
		deadLetter(t, p.Queue(), payments...)
		c := &qcli{t: t, db: dbArgs}

		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		stderr := &cancelOnWrite{cancel: cancel}
		out, err := c.exec(ctx, stderr, "redrive", "payments.dead", "-batch", "2", "-json")
		if want := "duroq queues redrive: interrupted after 2 of ~5 dead letters (context canceled)"; err == nil || err.Error() != want || exitCode(err) != 130 {
			t.Fatalf("interrupted redrive = %v (exit %d); want %q (exit 130)", err, exitCode(err), want)
		}
		var moved map[string]any
		if json.Unmarshal([]byte(out), &moved) != nil || moved["moved"] != 2.0 || moved["selected"] != 2.0 || moved["interrupted"] != true ||
			stderr.String() != "duroq queues redrive: 2 of ~5 dead letters done (2 moved)\n" {
			t.Errorf("interrupted redrive -json printed %q, told %q", out, stderr.String())
		}

		var progress bytes.Buffer
		out, err = c.exec(t.Context(), &progress, "redrive", "payments.dead", "-batch", "2")
		if err != nil || out != "moved 3 messages from payments.dead to the queue each came from\n" {
			t.Fatalf("redrive = %q, %v", out, err)
		}
		if want := "duroq queues redrive: 2 of ~3 dead letters done (2 moved)\nduroq queues redrive: 3 of ~3 dead letters done (3 moved)\n"; progress.String() != want {
			t.Errorf("redrive told %q; want %q", progress.String(), want)
		}
		if st := c.stats("payments"); st.Ready != 5 {
			t.Errorf("after the redrives, payments = %+v; want the 5 messages back", st)
		}
		if st := c.stats("payments.dead"); st.Ready+st.Delayed+st.Locked != 0 {
			t.Errorf("after the redrives, payments.dead = %+v", st)
		}
	})
}

// TestQueuesPauseAndResume: pause stops a queue's consumers in every process (here
// the provider the test holds, which the command does not share: another pool, or
// another SQLite connection watching the file) while producers go on; list and
// stats show it, also for a queue without messages; resume wakes a consumer waiting
// in another process.
func TestQueuesPauseAndResume(t *testing.T) {
	onEachBackend(t, func(t *testing.T, p *adapter.Provider, dbArgs []string) {
		q, ctx := p.Queue(), t.Context()
		c := &qcli{t: t, db: dbArgs}
		if out := c.run("pause", "jobs"); out != "paused queue jobs: its consumers receive none of its messages until it is resumed\n" {
			t.Errorf("pause printed %q", out)
		}
		var paused map[string]any
		c.decode(&paused, "pause", "idle")
		if paused["queue"] != "idle" || paused["paused"] != true {
			t.Errorf("pause -json printed %v", paused)
		}
		if err := q.Enqueue(ctx, mq.Message{Queue: "jobs", Payload: []byte("j1")}); err != nil {
			t.Fatalf("Enqueue into a paused queue: %v", err)
		}
		if b, err := q.DequeueBatch(ctx, "jobs", mq.DequeueOptions{}); b != nil || err != nil {
			t.Fatalf("a queue paused by the command delivered %+v, %v", b, err)
		}
		qs := c.listedQueues()
		if !slices.Equal(qs["jobs"], []string{"1", "0", "0", "0", "-", "yes"}) || !slices.Equal(qs["idle"], []string{"0", "0", "0", "0", "-", "yes"}) {
			t.Errorf("list of the paused queues = %q", qs)
		}
		if st := c.stats("jobs"); !st.Paused || st.Ready != 1 {
			t.Errorf("stats jobs = %+v; want 1 ready, paused", st)
		}
		if out := c.run("stats", "jobs"); !strings.Contains(out, "Paused:") || !strings.Contains(out, "yes") {
			t.Errorf("stats jobs printed:\n%s", out)
		}

		type polled struct {
			b   *mq.Batch
			err error
		}
		got := make(chan polled, 1)
		go func() {
			b, err := q.DequeueBatch(ctx, "jobs", mq.DequeueOptions{Wait: 30 * time.Second})
			got <- polled{b, err}
		}()
		time.Sleep(200 * time.Millisecond) // let the poll find nothing and wait
		resumed := time.Now()
		if out := c.run("resume", "jobs"); out != "resumed queue jobs\n" {
			t.Errorf("resume printed %q", out)
		}
		select {
		case p := <-got:
			if p.err != nil || p.b == nil || string(p.b.Messages[0].Payload) != "j1" {
				t.Fatalf("the waiting consumer got %+v, %v after resume", p.b, p.err)
			}
			t.Logf("resume in another process woke the waiting consumer after %v", time.Since(resumed))
		case <-time.After(5 * time.Second):
			t.Fatal("resume did not wake the consumer waiting in another process")
		}
		c.run("resume", "idle")
		if qs := c.listedQueues(); qs["idle"] != nil || qs["jobs"][5] != "no" {
			t.Errorf("list after resume = %q; want jobs not paused and idle gone", qs)
		}
	})
}

// TestQueuesRefusesBadCommandLines: as `duroq instances`, a missing SQLite file is
// refused (and not created) and usage errors exit 2, bounded, with the usage.
func TestQueuesRefusesBadCommandLines(t *testing.T) {
	refusesBadCommandLines(t, "queues", queuesCmd, "purge", func(missing, long string) [][]string {
		return [][]string{
			{"peek", "-db", missing},
			{"peek", "", "-db", missing},
			{"peek", "q", "-db", missing, "-limit", "0"},
			{"peek", "q", "-db", missing, "-state", "stuck"},
			{"peek", "q", "-db", missing, "-limit", "1001"},
			{"peek", "q", "-db", missing, "-after", "-1"},
			{"dead-letters", "q", "-db", missing, "-after", "x"},
			{"stats", "q", "-db", missing, "-bogus"},
			{"redrive", "q", "-db", missing, "-id", "0"},
			{"redrive", "q", "-db", missing, "-batch", "1001"},
			{"purge", "q", "-db", missing, "-id", long},
			{"purge", "q", "-db", missing, "-" + long},
			{"pause", "-db", missing},
			{"resume", "", "-db", missing},
			{"pause", "q", "r", "-db", missing},
		}
	})
}

// refusesBadCommandLines checks a command group (`duroq <group>`): a missing SQLite
// file is refused with exit 1 and not created; bad command lines — the common ones
// and those bad(missing, long) adds — exit 2 with a bounded message and the group's
// usage; help and `<sub> -h` print the usage.
func refusesBadCommandLines(t *testing.T, group string, cmd func(args []string, stdout, stderr io.Writer) error, sub string, bad func(missing, long string) [][]string) {
	t.Helper()
	missing := filepath.Join(t.TempDir(), "typo.db")
	var out, stderr bytes.Buffer
	err := cmd([]string{"list", "-db", missing}, &out, &stderr)
	if err == nil || !strings.HasPrefix(err.Error(), "duroq "+group+" list: no SQLite database at ") || exitCode(err) != 1 {
		t.Fatalf("list of a missing file = %v; want an error saying so", err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("list created %s", missing)
	}
	long := strings.Repeat("y", 100_000)
	common := [][]string{nil, {"bogus"}, {long}, {"list"}, {"list", "-db", missing, "extra"}}
	for _, args := range append(common, bad(missing, long)...) {
		stderr.Reset()
		err := cmd(args, &out, &stderr)
		if err == nil || exitCode(err) != 2 || !strings.HasPrefix(err.Error(), "duroq "+group) || len(err.Error()) > 400 ||
			!strings.Contains(stderr.String(), "usage: duroq "+group) {
			t.Errorf("%s %.80q = %.500v (exit %d), usage %.100q; want a bounded usage error", group, args, err, exitCode(err), stderr.String())
		}
	}
	for _, args := range [][]string{{"help"}, {sub, "-h"}} {
		stderr.Reset()
		if err := cmd(args, &out, &stderr); err != nil || !strings.Contains(stderr.String(), "usage: duroq "+group) {
			t.Errorf("%s %q = %v, usage %q", group, args, err, stderr.String())
		}
	}
}

// TestQueuesLimit: limit bounds a queue and a group of it for every process (here
// the provider the test holds), limits lists them with what each holds in flight,
// -remove lifts them, and bad flags are usage errors.
func TestQueuesLimit(t *testing.T) {
	onEachBackend(t, func(t *testing.T, p *adapter.Provider, dbArgs []string) {
		q, ctx := p.Queue(), t.Context()
		c := &qcli{t: t, db: dbArgs}
		if out := c.run("limit", "mail", "-max-in-flight", "2"); out != "limited queue mail in every process: at most 2 batches in flight\n" {
			t.Errorf("limit printed %q", out)
		}
		var set limitJSON
		c.decode(&set, "limit", "mail", "-group", "acme", "-rate", "100", "-per", "1m")
		if set.Group != "acme" || set.Rate != 100 || set.Per != "1m0s" {
			t.Errorf("limit -json printed %+v", set)
		}
		for _, m := range []string{"m1", "m2", "m3"} {
			if err := q.Enqueue(ctx, mq.Message{Queue: "mail", LimitGroup: "acme", Payload: []byte(m)}); err != nil {
				t.Fatal(err)
			}
		}
		bs, err := q.DequeueBatches(ctx, "mail", mq.DequeueOptions{}, 10)
		if err != nil || len(bs) != 2 {
			t.Fatalf("DequeueBatches under the limit set by the command = %d batches, %v; want 2", len(bs), err)
		}
		out := c.run("limits", "mail")
		var rows []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			rows = append(rows, strings.Join(strings.Fields(line), " "))
		}
		if want := []string{"(queue) 2 2 -", "acme - 2 100 per 1m0s"}; !slices.Equal(rows, want) {
			t.Errorf("limits printed:\n%s\nwant the rows %q", out, want)
		}
		if out := c.run("limit", "mail", "-remove"); out != "removed the limit of queue mail\n" {
			t.Errorf("limit -remove printed %q", out)
		}
		var listed map[string][]limitJSON
		c.decode(&listed, "limits", "mail")
		if ls := listed["limits"]; len(ls) != 1 || ls[0].Group != "acme" || ls[0].InFlight == nil || *ls[0].InFlight != 2 {
			t.Errorf("limits -json after removing the queue's = %+v", listed)
		}
		for _, args := range [][]string{{"limit", "mail"}, {"limit", "mail", "-remove", "-max-in-flight", "1"}, {"limit", "mail", "-rate", "5"}} {
			if _, _, err := c.try(args...); err == nil {
				t.Errorf("%q succeeded", args)
			}
		}
	})
}
