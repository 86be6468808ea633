package conformance

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// boundCases: keyed batches bounded by DequeueOptions.MaxMessages and MaxBytes.
var boundCases = []mqCase{
	{"MaxMessagesTakesTheOldestAndHoldsTheRest", testMaxMessagesTakesTheOldestAndHoldsTheRest},
	{"MaxMessagesAfterAbandonStartsAgainAtTheOldest", testMaxMessagesAfterAbandonStartsAgainAtTheOldest},
	{"MaxBytesTakesAPrefixAndTheFirstMessageAlwaysJoins", testMaxBytesTakesAPrefixAndTheFirstMessageAlwaysJoins},
	{"DefaultMaxMessagesAndNegativeMeansNoBound", testDefaultMaxMessagesAndNegativeMeansNoBound},
	{"DefaultMaxBytesAndNegativeMeansNoBound", testDefaultMaxBytesAndNegativeMeansNoBound},
}

// multiBatchCases: DequeueBatches.
var multiBatchCases = []mqCase{
	{"DequeueBatchesTakesUpToMaxBatchesOfDistinctKeys", testDequeueBatchesTakesUpToMaxBatchesOfDistinctKeys},
	{"DequeueBatchesObeysBoundsAndFilters", testDequeueBatchesObeysBoundsAndFilters},
	{"DequeueBatchesWaitsAndWakesOnEnqueue", testDequeueBatchesWaitsAndWakesOnEnqueue},
	{"DequeueBatchesRejectsInvalidInput", testDequeueBatchesRejectsInvalidInput},
	{"ConcurrentDequeueBatchesNeverShareAKeyOrAMessage", testConcurrentDequeueBatchesNeverShareAKeyOrAMessage},
}

// fetchBatches calls DequeueBatches on qn and fails on error; it checks the shape of
// every batch and that no two batches share a token or a routing key.
func fetchBatches(t *testing.T, q mq.MessageQueue, opts mq.DequeueOptions, max int) []*mq.Batch {
	t.Helper()
	bs, err := q.DequeueBatches(t.Context(), qn, opts, max)
	if err != nil {
		t.Fatalf("DequeueBatches(%d) failed: %v", max, err)
	}
	if len(bs) > max {
		t.Fatalf("DequeueBatches(%d) returned %d batches", max, len(bs))
	}
	tokens, keys := map[string]bool{}, map[string]bool{}
	for _, b := range bs {
		if b == nil {
			t.Fatalf("DequeueBatches(%d) returned a nil batch among %d", max, len(bs))
		}
		checkBatchShape(t, qn, b)
		if tokens[b.Token] {
			t.Fatalf("DequeueBatches(%d) returned two batches with the token %q", max, b.Token)
		}
		tokens[b.Token] = true
		if b.RoutingKey != "" && keys[b.RoutingKey] {
			t.Fatalf("DequeueBatches(%d) returned two batches of key %q", max, b.RoutingKey)
		}
		keys[b.RoutingKey] = true
	}
	return bs
}

// batchPayloads renders batches as their payloads, one group per batch.
func batchPayloads(bs []*mq.Batch) string {
	var parts []string
	for _, b := range bs {
		parts = append(parts, strings.Join(payloads(b), ","))
	}
	return "[" + strings.Join(parts, "] [") + "]"
}

func testMaxMessagesTakesTheOldestAndHoldsTheRest(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("K", "a1"), kmsg("K", "a2"), kmsg("K", "a3"), kmsg("L", "b1"), kmsg("K", "a4"), kmsg("K", "a5"), msg("u1"))
	two := mq.DequeueOptions{MaxMessages: 2}
	b := fetchPayloads(t, q, two, "MaxMessages 2 takes the key's two oldest messages", "a1", "a2")
	if li, err := q.Lock(t.Context(), b.Token); err != nil || li.Messages != 2 {
		t.Fatalf("Lock of the bounded batch = %+v, %v; want 2 messages", li, err)
	}
	if st, err := q.KeyStats(t.Context(), qn, "K"); err != nil || st.Ready != 3 || st.Locked != 2 || st.Delayed != 0 || st.MaxAttempt != 1 {
		t.Fatalf("KeyStats(K) = %+v, %v; want 2 locked and the 3 held behind them ready", st, err)
	}
	fetchPayloads(t, q, two, "the other key flows", "b1")
	fetchPayloads(t, q, two, "the un-keyed message flows", "u1")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "the key's other messages wait behind the bounded batch, even for an unbounded consumer")
	if bs := fetchBatches(t, q, mq.DequeueOptions{}, 5); len(bs) != 0 {
		t.Fatalf("DequeueBatches returned %s while key K is held", batchPayloads(bs))
	}
	ack(t, q, b)
	b = fetchPayloads(t, q, two, "the next batch of the key continues where the acked one stopped", "a3", "a4")
	wantAttempts(t, b, "first fetch", 1, 1)
	ack(t, q, b)
	fetchPayloads(t, q, two, "then the last one", "a5")
}

func testMaxMessagesAfterAbandonStartsAgainAtTheOldest(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("K", "a1"), kmsg("K", "a2"), kmsg("K", "a3"))
	two := mq.DequeueOptions{MaxMessages: 2}
	b := fetchPayloads(t, q, two, "MaxMessages 2", "a1", "a2")
	abandon(t, q, b, mq.AbandonOptions{})
	b = fetchPayloads(t, q, two, "after an Abandon the key starts again at its oldest message", "a1", "a2")
	wantAttempts(t, b, "second fetch of the abandoned messages", 2, 2)
	settle(t, q, mq.Settlement{Token: b.Token, Acked: 1})
	b = fetchPayloads(t, q, two, "after a partial ack the key starts at the first released message", "a2", "a3")
	wantAttempts(t, b, "a2's released fetch was not tried", 2, 1)
}

func testMaxBytesTakesAPrefixAndTheFirstMessageAlwaysJoins(t *testing.T, e env) {
	q := e.open(t)
	put(t, q,
		kmsg("K", "aaa"), kmsg("K", "bbb"), kmsg("K", "c"), // 7 bytes: exactly the bound
		kmsg("K", "dddddddddd"),                              // 10 bytes: over the bound on its own
		kmsg("K", "ee"), kmsg("K", "ffffff"), kmsg("K", "g"), // 2+6 > 7: g must not join ee
		kmsg("K", ""), kmsg("K", ""), kmsg("K", "hhhhhhh"), kmsg("K", ""), // empty payloads weigh nothing
	)
	seven := mq.DequeueOptions{MaxBytes: 7}
	for _, want := range [][]string{
		{"aaa", "bbb", "c"},
		{"dddddddddd"},
		{"ee"},
		{"ffffff", "g", "", ""},
		{"hhhhhhh", ""},
	} {
		b := fetchPayloads(t, q, seven, "MaxBytes 7: the longest prefix within 7 payload bytes, at least one message", want...)
		mustFetchNothing(t, q, seven, "the rest of the key waits behind the bounded batch")
		ack(t, q, b)
	}
	put(t, q, kmsg("K", "aaaa"), kmsg("K", "bbbb"), kmsg("K", "c"))
	fetchPayloads(t, q, mq.DequeueOptions{MaxBytes: 100, MaxMessages: 2}, "MaxMessages bounds a batch within MaxBytes", "aaaa", "bbbb")
}

func testDefaultMaxMessagesAndNegativeMeansNoBound(t *testing.T, e env) {
	q := e.open(t)
	msgs := make([]mq.Message, mq.DefaultMaxMessages+1)
	for i := range msgs {
		msgs[i] = kmsg("K", fmt.Sprint(i))
	}
	put(t, q, msgs...)
	// The key's oldest n messages, in order; compared by count and payloads so that a
	// failure does not print a thousand messages.
	wantOldest := func(b *mq.Batch, n int, rule string) {
		t.Helper()
		for i, p := range payloads(b) {
			if p != fmt.Sprint(i) {
				t.Fatalf("%s: message %d of the batch is %q, want %q: the key's oldest messages in order", rule, i, p, fmt.Sprint(i))
			}
		}
		if len(b.Messages) != n {
			t.Fatalf("%s: the batch holds %d of the key's %d messages, want %d", rule, len(b.Messages), len(msgs), n)
		}
	}
	b := mustFetch(t, q, mq.DequeueOptions{}, "key K")
	wantOldest(b, mq.DefaultMaxMessages, "a zero MaxMessages means DefaultMaxMessages")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "the key's last message waits behind the batch")
	abandon(t, q, b, mq.AbandonOptions{IgnoreAttempt: true})
	wantOldest(mustFetch(t, q, mq.DequeueOptions{MaxMessages: -1}, "key K"), len(msgs), "a negative MaxMessages means no bound")
}

func testDefaultMaxBytesAndNegativeMeansNoBound(t *testing.T, e env) {
	q := e.open(t)
	big := make([]byte, mq.MaxPayloadSize)
	put(t, q, mq.Message{Queue: qn, RoutingKey: "K", Payload: big}, mq.Message{Queue: qn, RoutingKey: "K", Payload: big},
		mq.Message{Queue: qn, RoutingKey: "K", Payload: big})
	b := mustFetch(t, q, mq.DequeueOptions{}, "key K")
	if len(b.Messages) != mq.DefaultMaxBytes/mq.MaxPayloadSize {
		t.Fatalf("a zero MaxBytes took %d messages of MaxPayloadSize bytes, want %d (DefaultMaxBytes)", len(b.Messages), mq.DefaultMaxBytes/mq.MaxPayloadSize)
	}
	abandon(t, q, b, mq.AbandonOptions{IgnoreAttempt: true})
	if b := mustFetch(t, q, mq.DequeueOptions{MaxBytes: -1}, "key K"); len(b.Messages) != 3 {
		t.Fatalf("a negative MaxBytes took %d of the key's 3 messages, want all: no bound", len(b.Messages))
	}
}

func testDequeueBatchesTakesUpToMaxBatchesOfDistinctKeys(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, kmsg("A", "a1"), msg("u1"), kmsg("B", "b1"), kmsg("A", "a2"), msg("u2"), kmsg("C", "c1"), kmsg("B", "b2"), kmsg("D", "d1"))
	held := fetchPayloads(t, q, mq.DequeueOptions{}, "key A, oldest first", "a1", "a2")
	bs := fetchBatches(t, q, mq.DequeueOptions{LockTimeout: long}, 3)
	if got, want := batchPayloads(bs), "[u1] [b1,b2] [u2]"; got != want {
		t.Fatalf("DequeueBatches(3) returned %s, want %s: up to 3 batches in eligibility order, each key once with its messages, the held key A left out", got, want)
	}
	clk.Advance(time.Second)
	bs = fetchBatches(t, q, mq.DequeueOptions{LockTimeout: 10 * time.Second}, 10)
	if got, want := batchPayloads(bs), "[c1] [d1]"; got != want {
		t.Fatalf("DequeueBatches(10) returned %s, want %s: what is left", got, want)
	}
	for _, b := range bs {
		wantTime(t, b.LockedUntil, clk.Now().Add(10*time.Second), "LockedUntil of a batch of DequeueBatches")
	}
	if bs := fetchBatches(t, q, mq.DequeueOptions{}, 10); len(bs) != 0 {
		t.Fatalf("DequeueBatches returned %s although every message is locked", batchPayloads(bs))
	}
	wantStats(t, q, qn, mq.Stats{Locked: 8}, "every message is locked")
	ack(t, q, held)
	wantStats(t, q, qn, mq.Stats{Locked: 6}, "the batches of DequeueBatches are independent of the acked one")
}

func testDequeueBatchesObeysBoundsAndFilters(t *testing.T, e env) {
	q := e.open(t)
	gpu := func(rk, p string) mq.Message {
		return mq.Message{Queue: qn, RoutingKey: rk, Tag: "gpu", Payload: []byte(p)}
	}
	put(t, q, gpu("A", "a1"), kmsg("B", "b1"), gpu("A", "a2"), gpu("", "u1"), msg("u2"), gpu("C", "c1"), kmsg("A", "a3"),
		mq.Message{Queue: qn, Session: "s1", Tag: "gpu", Payload: []byte("s1")})
	bs := fetchBatches(t, q, mq.DequeueOptions{Tags: mq.Tags("gpu"), MaxMessages: 1}, 10)
	if got, want := batchPayloads(bs), "[a1] [u1] [c1]"; got != want {
		t.Fatalf("DequeueBatches with Tags(gpu) and MaxMessages 1 returned %s, want %s: only gpu messages, no session message without Session options, one message per batch", got, want)
	}
	bs = fetchBatches(t, q, mq.DequeueOptions{MaxMessages: 1}, 10)
	if got, want := batchPayloads(bs), "[b1] [u2]"; got != want {
		t.Fatalf("DequeueBatches returned %s, want %s: a2 and a3 wait behind the held key A", got, want)
	}
}

func testDequeueBatchesWaitsAndWakesOnEnqueue(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	wait := 300 * time.Millisecond
	start := time.Now()
	bs, err := q.DequeueBatches(t.Context(), qn, mq.DequeueOptions{Wait: wait}, 4)
	took := time.Since(start)
	if err != nil || len(bs) != 0 {
		t.Fatalf("DequeueBatches with Wait on an empty queue = %s, %v; want no batch and no error", batchPayloads(bs), err)
	}
	if took < wait*9/10 {
		t.Fatalf("DequeueBatches with Wait %v on an empty queue returned after %v: it must wait", wait, took)
	}
	done := after(wakeLead, func() error { return q.Enqueue(t.Context(), msg("u1"), kmsg("A", "a1")) })
	start = time.Now()
	bs = fetchBatches(t, q, mq.DequeueOptions{Wait: 10 * wake}, 4)
	took = time.Since(start)
	wantNoErr(t, done, "Enqueue")
	if len(bs) == 0 {
		t.Fatalf("DequeueBatches with Wait returned nothing after %v although messages were enqueued after %v", took, wakeLead)
	}
	if took > wake {
		t.Fatalf("an Enqueue in the same process must wake a waiting DequeueBatches: it returned after %v, want under %v", took, wake)
	}
	if got, want := batchPayloads(bs), "[u1] [a1]"; got != want {
		t.Fatalf("the waiting DequeueBatches returned %s, want %s: both messages came in one Enqueue", got, want)
	}
}

func testDequeueBatchesRejectsInvalidInput(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("u1"))
	type call struct {
		invalidDequeue
		max int
	}
	calls := []call{
		{invalidDequeue{"max 0", qn, mq.DequeueOptions{}, []string{"max"}}, 0},
		{invalidDequeue{"a negative max", qn, mq.DequeueOptions{}, []string{"max"}}, -1},
	}
	for _, c := range invalidDequeues() {
		calls = append(calls, call{c, 1})
	}
	for _, c := range calls {
		bs, err := call2(t, "DequeueBatches", func() ([]*mq.Batch, error) { return q.DequeueBatches(t.Context(), c.queue, c.opts, c.max) })
		if len(bs) != 0 {
			t.Errorf("DequeueBatches with %s returned %s", c.rule, batchPayloads(bs))
		}
		wantInvalid(t, err, "dequeue", "DequeueBatches with "+c.rule, c.fields...)
	}
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "rejected DequeueBatches calls lock nothing", "u1")
	wantAttempts(t, b, "rejected DequeueBatches calls count no attempt", 1)
}

func testConcurrentDequeueBatchesNeverShareAKeyOrAMessage(t *testing.T, e env) {
	q := e.open(t)
	const keys, perKey, unkeyed, workers = 40, 3, 40, 4
	var msgs []mq.Message
	for i := range unkeyed {
		msgs = append(msgs, msg(fmt.Sprintf("u%d", i)))
	}
	for j := range perKey {
		for k := range keys {
			msgs = append(msgs, kmsg(fmt.Sprintf("k%d", k), fmt.Sprintf("k%d-%d", k, j)))
		}
	}
	put(t, q, msgs...)
	var (
		mu     sync.Mutex
		seen   = map[string]int{}
		byKey  = map[string]int{}
		errs   []error
		rounds int
	)
	race(workers, func(int) {
		for {
			bs, err := q.DequeueBatches(t.Context(), qn, mq.DequeueOptions{LockTimeout: long}, 8)
			mu.Lock()
			rounds++
			if err != nil {
				errs = append(errs, err)
			}
			for _, b := range bs {
				byKey[b.RoutingKey]++
				for _, p := range payloads(b) {
					seen[p]++
				}
			}
			mu.Unlock()
			if err != nil || len(bs) == 0 {
				return
			}
		}
	})
	if len(errs) > 0 {
		t.Fatalf("concurrent DequeueBatches failed: %v", errs[0])
	}
	for k, n := range byKey {
		if k != "" && n != 1 {
			t.Fatalf("key %q was handed out in %d batches while its first batch was held", k, n)
		}
	}
	if len(seen) != len(msgs) {
		t.Fatalf("concurrent DequeueBatches handed out %d distinct messages, want all %d", len(seen), len(msgs))
	}
	for p, n := range seen {
		if n != 1 {
			t.Fatalf("message %s was handed out %d times", p, n)
		}
	}
}
