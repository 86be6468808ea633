package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// concurrencyCases: many goroutines on one queue.
var concurrencyCases = []mqCase{
	{"ConcurrentConsumersNeverShareAKeyAndLoseNothing", testConcurrentConsumersNeverShareAKeyAndLoseNothing},
	{"ConcurrentFetchersOfOneKeyExactlyOneWins", testConcurrentFetchersOfOneKeyExactlyOneWins},
	{"ConcurrentFetchersGetDistinctKeys", testConcurrentFetchersGetDistinctKeys},
	{"ConcurrentAcksOfOneTokenExactlyOneSucceeds", testConcurrentAcksOfOneTokenExactlyOneSucceeds},
	{"ConcurrentAckAndAbandonExactlyOneSucceeds", testConcurrentAckAndAbandonExactlyOneSucceeds},
	{"ConcurrentEnqueuesKeepEveryMessage", testConcurrentEnqueuesKeepEveryMessage},
	{"ConcurrentEnqueuesOfOneMessageKeyExactlyOneWins", testConcurrentEnqueuesOfOneMessageKeyExactlyOneWins},
	{"ConcurrentOwnersNeverShareASession", testConcurrentOwnersNeverShareASession},
}

// race runs fn(i) for i in [0, n) in n goroutines released at the same instant.
func race(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

func testConcurrentConsumersNeverShareAKeyAndLoseNothing(t *testing.T, e env) {
	q := e.open(t)
	const (
		keys    = 50
		perKey  = 20
		unkeyed = 100
		workers = 8
	)
	total := keys*perKey + unkeyed
	keyName := func(k int) string { return fmt.Sprintf("k%02d", k) }

	var (
		mu      sync.Mutex
		holder  = map[string]int{}  // routing key -> consumer holding its batch
		next    = map[string]int{}  // routing key -> sequence number its next batch must start at
		acked   = map[string]bool{} // payload -> acked (marked before the Ack call returns)
		done    int                 // messages acked
		batches int
	)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		cancel()
	}

	var producers, consumers sync.WaitGroup
	for parity := range 2 { // each key has one producer, so its enqueue order is well defined
		producers.Go(func() {
			for r := range perKey {
				var msgs []mq.Message
				for k := parity; k < keys; k += 2 {
					msgs = append(msgs, kmsg(keyName(k), fmt.Sprintf("%s/%d", keyName(k), r)))
				}
				if err := q.Enqueue(ctx, msgs...); err != nil {
					if ctx.Err() == nil {
						fail("Enqueue of %d messages failed: %v", len(msgs), err)
					}
					return
				}
			}
		})
	}
	producers.Go(func() {
		for i := range unkeyed {
			if err := q.Enqueue(ctx, msg(fmt.Sprintf("u/%d", i))); err != nil {
				if ctx.Err() == nil {
					fail("Enqueue failed: %v", err)
				}
				return
			}
		}
	})

	// receive checks a batch as it arrives and records its consumer as the key's holder.
	receive := func(w int, b *mq.Batch) bool {
		mu.Lock()
		defer mu.Unlock()
		batches++
		for _, p := range payloads(b) {
			if acked[p] {
				fail("consumer %d received message %q after it was acked", w, p)
				return false
			}
		}
		if b.RoutingKey == "" {
			if len(b.Messages) != 1 || !strings.HasPrefix(string(b.Messages[0].Payload), "u/") {
				fail("consumer %d received an un-keyed batch %s, want one un-keyed message", w, describe(b))
				return false
			}
			return true
		}
		if other, ok := holder[b.RoutingKey]; ok {
			fail("consumer %d received %s of key %q while consumer %d holds the key", w, describe(b), b.RoutingKey, other)
			return false
		}
		holder[b.RoutingKey] = w
		for i, p := range payloads(b) {
			key, seq, _ := strings.Cut(p, "/")
			n, _ := strconv.Atoi(seq)
			if key != b.RoutingKey || n != next[key]+i {
				fail("consumer %d received batch %s of key %q: want the key's messages from %s/%d on, contiguous and in enqueue order",
					w, describe(b), b.RoutingKey, b.RoutingKey, next[b.RoutingKey])
				return false
			}
		}
		return true
	}

	for w := range workers {
		consumers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for ctx.Err() == nil {
				b, err := q.DequeueBatch(ctx, qn, mq.DequeueOptions{LockTimeout: long, Wait: 20 * time.Millisecond})
				if err != nil {
					if ctx.Err() == nil {
						fail("consumer %d: DequeueBatch failed: %v", w, err)
					}
					return
				}
				if b == nil {
					continue
				}
				if !receive(w, b) {
					return
				}
				release := rng.IntN(8) == 0 // abandon some batches to force redeliveries
				mu.Lock()
				delete(holder, b.RoutingKey)
				if !release {
					for _, p := range payloads(b) {
						acked[p] = true
					}
					if b.RoutingKey != "" {
						next[b.RoutingKey] += len(b.Messages)
					}
				}
				mu.Unlock()
				if release {
					if err := q.Abandon(t.Context(), b.Token, mq.AbandonOptions{}); err != nil {
						fail("consumer %d: Abandon of a live batch failed: %v", w, err)
						return
					}
					continue
				}
				if err := q.Ack(t.Context(), b.Token); err != nil {
					fail("consumer %d: Ack of a live batch failed: %v", w, err)
					return
				}
				mu.Lock()
				done += len(b.Messages)
				if done == total {
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	producers.Wait()
	consumers.Wait()
	if t.Failed() {
		return
	}
	if done != total {
		t.Fatalf("only %d of %d messages were acked within 60s (%d batches)", done, total, batches)
	}
	for k := range keys {
		if next[keyName(k)] != perKey {
			t.Errorf("key %s: %d of its %d messages were acked", keyName(k), next[keyName(k)], perKey)
		}
	}
	if len(acked) != total {
		t.Errorf("%d distinct messages were acked, want %d", len(acked), total)
	}
	wantEmpty(t, q, qn, "every message was acked exactly once")
	t.Logf("%d messages in %d batches by %d consumers", total, batches, workers)
}

func testConcurrentFetchersOfOneKeyExactlyOneWins(t *testing.T, e env) {
	q := e.open(t)
	for round := range 5 {
		key := fmt.Sprintf("key-%d", round)
		put(t, q, kmsg(key, "1"), kmsg(key, "2"), kmsg(key, "3"))
		var (
			mu   sync.Mutex
			wins []*mq.Batch
		)
		race(10, func(int) {
			b, err := q.DequeueBatch(t.Context(), qn, mq.DequeueOptions{})
			if err != nil {
				t.Errorf("DequeueBatch failed: %v", err)
				return
			}
			if b != nil {
				mu.Lock()
				wins = append(wins, b)
				mu.Unlock()
			}
		})
		if len(wins) != 1 {
			t.Fatalf("round %d: %d of 10 concurrent fetchers received key %q, want exactly one", round, len(wins), key)
		}
		wantPayloads(t, wins[0], "the winner gets the whole key", "1", "2", "3")
	}
}

func testConcurrentFetchersGetDistinctKeys(t *testing.T, e env) {
	q := e.open(t)
	const n = 10
	for i := range n {
		key := fmt.Sprintf("key-%d", i)
		put(t, q, kmsg(key, key+"/1"), kmsg(key, key+"/2"))
	}
	var (
		mu  sync.Mutex
		got = map[string]int{}
	)
	race(n, func(int) {
		b, err := q.DequeueBatch(t.Context(), qn, mq.DequeueOptions{})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			t.Errorf("DequeueBatch failed: %v", err)
		case b == nil:
			t.Errorf("a concurrent fetcher got nothing although %d keys were eligible for %d fetchers", n, n)
		default:
			if len(b.Messages) != 2 {
				t.Errorf("key %q was delivered with %d of its 2 messages", b.RoutingKey, len(b.Messages))
			}
			got[b.RoutingKey]++
		}
	})
	for key, c := range got {
		if c != 1 {
			t.Errorf("key %q was received by %d concurrent fetchers, want 1", key, c)
		}
	}
	if len(got) != n {
		t.Errorf("%d concurrent fetchers received %d distinct keys, want %d", n, len(got), n)
	}
}

func testConcurrentAcksOfOneTokenExactlyOneSucceeds(t *testing.T, e env) {
	q := e.open(t)
	const rounds = 20
	for round := range rounds {
		put(t, q, msg(fmt.Sprint(round)))
		b := mustFetch(t, q, mq.DequeueOptions{}, "the round's message")
		errs := make([]error, 2)
		race(2, func(i int) {
			errs[i] = q.Ack(t.Context(), b.Token, mq.Message{Queue: "follow-ups", Payload: []byte(fmt.Sprintf("%d/%d", round, i))})
		})
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else if !errors.Is(err, mq.ErrLockLost) {
				t.Fatalf("round %d: a concurrent Ack failed with %v, want ErrLockLost", round, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d of 2 concurrent Acks of one token succeeded, want exactly 1 (errors %v)", round, ok, errs)
		}
	}
	wantEmpty(t, q, qn, "every message was acked")
	wantStats(t, q, "follow-ups", mq.Stats{Ready: rounds}, "only the winning Ack of each round enqueues its follow-up")
}

func testConcurrentAckAndAbandonExactlyOneSucceeds(t *testing.T, e env) {
	q := e.open(t)
	for round := range 20 {
		put(t, q, msg(fmt.Sprint(round)))
		b := mustFetch(t, q, mq.DequeueOptions{}, "the round's message")
		errs := make([]error, 2)
		race(2, func(i int) {
			if i == 0 {
				errs[0] = q.Ack(t.Context(), b.Token)
			} else {
				errs[1] = q.Abandon(t.Context(), b.Token, mq.AbandonOptions{})
			}
		})
		switch {
		case errs[0] == nil && errors.Is(errs[1], mq.ErrLockLost):
			wantEmpty(t, q, qn, "the Ack won: the message is gone")
		case errs[1] == nil && errors.Is(errs[0], mq.ErrLockLost):
			r := fetchPayloads(t, q, mq.DequeueOptions{}, "the Abandon won: the message is back", fmt.Sprint(round))
			wantAttempts(t, r, "second fetch", 2)
			ack(t, q, r)
		default:
			t.Fatalf("round %d: concurrent Ack and Abandon of one token returned %v and %v; want exactly one success and ErrLockLost for the other",
				round, errs[0], errs[1])
		}
	}
}

func testConcurrentEnqueuesKeepEveryMessage(t *testing.T, e env) {
	q := e.open(t)
	const goroutines, each = 8, 50
	race(goroutines, func(g int) {
		for i := range each {
			p := fmt.Sprintf("%d/%d", g, i)
			m := mq.Message{Queue: qn, Payload: []byte(p), Key: p}
			if i%5 == 0 {
				m.RoutingKey = fmt.Sprintf("g%d", g)
			}
			if err := q.Enqueue(t.Context(), m); err != nil {
				t.Errorf("concurrent Enqueue failed: %v", err)
				return
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	wantStats(t, q, qn, mq.Stats{Ready: goroutines * each}, "every concurrently enqueued message is stored")
	seenID := map[int64]bool{}
	seen := map[string]bool{}
	for {
		b := fetch(t, q, mq.DequeueOptions{})
		if b == nil {
			break
		}
		for _, d := range b.Messages {
			if seenID[d.ID] || seen[string(d.Payload)] {
				t.Fatalf("message id %d %q was delivered twice", d.ID, d.Payload)
			}
			seenID[d.ID] = true
			seen[string(d.Payload)] = true
			if d.Key != string(d.Payload) {
				t.Fatalf("message %q is delivered with Key %q", d.Payload, d.Key)
			}
		}
	}
	if len(seen) != goroutines*each {
		t.Fatalf("%d distinct messages were delivered, want %d", len(seen), goroutines*each)
	}
}

func testConcurrentEnqueuesOfOneMessageKeyExactlyOneWins(t *testing.T, e env) {
	q := e.open(t)
	for round := range 5 {
		key := fmt.Sprintf("key-%d", round)
		errs := make([]error, 8)
		race(len(errs), func(i int) {
			errs[i] = q.Enqueue(t.Context(), mq.Message{Queue: qn, Key: key, Payload: []byte(fmt.Sprint(i))}, msg("companion"))
		})
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else if !errors.Is(err, mq.ErrDuplicateKey) {
				t.Fatalf("round %d: a concurrent Enqueue of key %q failed with %v, want ErrDuplicateKey", round, key, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d of %d concurrent Enqueues of message key %q succeeded, want exactly 1", round, ok, len(errs), key)
		}
		wantStats(t, q, qn, mq.Stats{Ready: 2 * (round + 1)}, "only the winning Enqueue stored its messages")
	}
}

func testConcurrentOwnersNeverShareASession(t *testing.T, e env) {
	q := e.open(t)
	for round := range 10 {
		s := fmt.Sprintf("s%d", round)
		put(t, q, smsg(s, s+"/1"), smsg(s, s+"/2"))
		got := make([]*mq.Batch, 2)
		race(2, func(i int) {
			b, err := q.DequeueBatch(t.Context(), qn, as([]string{ownerA, ownerB}[i]))
			if err != nil {
				t.Errorf("DequeueBatch failed: %v", err)
			}
			got[i] = b
		})
		if t.Failed() {
			t.FailNow()
		}
		switch {
		case got[0] != nil && got[1] != nil:
			t.Fatalf("round %d: owner-a received %s and owner-b received %s: one session, two owners", round, describe(got[0]), describe(got[1]))
		case got[0] == nil && got[1] == nil:
			t.Fatalf("round %d: neither owner received a message of the unowned session %q", round, s)
		}
		winner, b := 0, got[0]
		if b == nil {
			winner, b = 1, got[1]
		}
		wantSession(t, b, s, s+"/1", "the winning owner gets the session's first message")
		ack(t, q, b)
		owner := []string{ownerA, ownerB}[winner]
		mustFetchNothing(t, q, as([]string{ownerA, ownerB}[1-winner]), "the losing owner must not receive the session's second message")
		b = mustFetch(t, q, as(owner), "the session's second message")
		wantSession(t, b, s, s+"/2", "the winning owner keeps the session")
		ack(t, q, b)
	}
}
