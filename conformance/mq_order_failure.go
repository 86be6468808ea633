package conformance

import (
	"testing"

	"github.com/duroq/duroq/mq"
)

// orderFailureCases: a key's order survives retries (the order rule of Settle):
// released messages that wait for a Delay keep their key held, and a lapsed batch
// keeps its messages ahead of the key's later ones.
var orderFailureCases = []mqCase{
	{"AbandonWithDelayHoldsTheKeyUntilTheMessagesReturn", testAbandonWithDelayHoldsTheKeyUntilTheMessagesReturn},
	{"AbandonWithDelayKillsTheToken", testAbandonWithDelayKillsTheToken},
	{"SettleWithDelayHoldsTheKeyBehindTheReleasedRest", testSettleWithDelayHoldsTheKeyBehindTheReleasedRest},
	{"SettleWithReleaseKeyWaivesTheOrderRule", testSettleWithReleaseKeyWaivesTheOrderRule},
	{"KeyIsReleasedAtOnceWithoutDelayOrWhenNothingIsReleased", testKeyIsReleasedAtOnceWithoutDelayOrWhenNothingIsReleased},
	{"LapsedBatchKeepsItsMessagesAheadOfLaterOnes", testLapsedBatchKeepsItsMessagesAheadOfLaterOnes},
	{"WaitingDequeueGetsTheHeldKeyWhenItsDelayEnds", testWaitingDequeueGetsTheHeldKeyWhenItsDelayEnds},
}

func testAbandonWithDelayHoldsTheKeyUntilTheMessagesReturn(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, kmsg("K", "a"))
	b := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key K", "a")
	due := clk.Now().Add(lt)
	abandon(t, q, b, mq.AbandonOptions{Delay: lt})
	put(t, q, kmsg("K", "b"), kmsg("L", "l"), msg("u"))
	l := fetchPayloads(t, q, mq.DequeueOptions{}, "a held key must not block the other keys", "l")
	u := fetchPayloads(t, q, mq.DequeueOptions{}, "a held key must not block un-keyed messages", "u")
	clk.justBefore(due)
	mustFetchNothing(t, q, mq.DequeueOptions{},
		"b, enqueued after a was abandoned with a Delay, must not be delivered before a is visible again")
	if st, err := q.KeyStats(t.Context(), qn, "K"); err != nil {
		t.Fatalf("KeyStats(K) failed: %v", err)
	} else if st.Ready != 1 || st.Delayed != 1 || st.Locked != 0 {
		t.Fatalf("KeyStats(K) = %+v while a waits for its Delay, want b ready (its key is held) and a delayed", st)
	}
	clk.past(due)
	got := fetchPayloads(t, q, mq.DequeueOptions{}, "once a is visible again the key's batch starts with a, then b", "a", "b")
	wantAttempts(t, got, "a's failed attempt counts, b was never fetched", 2, 1)
	for _, b := range []*mq.Batch{got, l, u} {
		ack(t, q, b)
	}
	wantEmpty(t, q, qn, "every message was acked")
}

func testAbandonWithDelayKillsTheToken(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("K", "a"))
	b := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key K", "a")
	abandon(t, q, b, mq.AbandonOptions{Delay: long})
	put(t, q, kmsg("K", "b"))
	wantLockLost(t, q.Ack(t.Context(), b.Token), "ack", "an Ack with the token of a batch abandoned with a Delay")
	_, err := q.Renew(t.Context(), b.Token, long)
	wantLockLost(t, err, "renew", "a Renew with the token of a batch abandoned with a Delay")
	wantLockLost(t, q.Abandon(t.Context(), b.Token, mq.AbandonOptions{}), "abandon",
		"a second Abandon (without Delay) with the token of a batch abandoned with a Delay")
	_, err = q.Lock(t.Context(), b.Token)
	wantLockLost(t, err, "lock", "Lock of a batch abandoned with a Delay")
	mustFetchNothing(t, q, mq.DequeueOptions{},
		"the calls with the dead token must neither release the held key nor bring a back early: b must wait")
	wantStats(t, q, qn, mq.Stats{Ready: 1, Delayed: 1}, "a waits for its Delay and b behind the held key")
}

func testSettleWithDelayHoldsTheKeyBehindTheReleasedRest(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, kmsg("K", "a1"), kmsg("K", "a2"), kmsg("K", "a3"), kmsg("K", "a4"))
	b := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key K", "a1", "a2", "a3", "a4")
	due := clk.Now().Add(lt)
	settle(t, q, mq.Settlement{Token: b.Token, Acked: 1, DeadLettered: 1, DeadLetterQueue: "dlq", Tried: 1,
		Reason: "a2 is poison, a3 failed", Delay: lt})
	put(t, q, kmsg("K", "a5"))
	d := fetchFrom(t, q, "dlq", mq.DequeueOptions{})
	if d == nil {
		t.Fatal("the dead letter a2 must be visible in the dead-letter queue at once")
	}
	wantPayloads(t, d, "the dead-letter queue holds exactly the dead-lettered message", "a2")
	clk.justBefore(due)
	mustFetchNothing(t, q, mq.DequeueOptions{},
		"a5, enqueued after the settlement released a3 and a4 with a Delay, must not be delivered before them")
	wantLockLost(t, q.Settle(t.Context(), mq.Settlement{Token: b.Token, Acked: 2}), "settle",
		"a Settle with the token of a batch already settled")
	clk.past(due)
	got := fetchPayloads(t, q, mq.DequeueOptions{}, "the released messages come back first, in order, then a5", "a3", "a4", "a5")
	wantAttempts(t, got, "a3 was tried, a4 was not, a5 never fetched", 2, 1, 1)
}

func testSettleWithReleaseKeyWaivesTheOrderRule(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("K", "a1"), kmsg("K", "a2"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key K", "a1", "a2")
	settle(t, q, mq.Settlement{Token: b.Token, Acked: 1, Delay: long, ReleaseKey: true})
	put(t, q, kmsg("K", "a3"))
	fetchPayloads(t, q, mq.DequeueOptions{},
		"ReleaseKey unlocks the key at once: the later a3 is delivered alone while a2 waits for its Delay", "a3")
	wantStats(t, q, qn, mq.Stats{Delayed: 1, Locked: 1}, "a2 is delayed and a3 locked")
}

func testKeyIsReleasedAtOnceWithoutDelayOrWhenNothingIsReleased(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("K", "a1"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key K", "a1")
	abandon(t, q, b, mq.AbandonOptions{})
	put(t, q, kmsg("K", "a2"))
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "an Abandon without Delay releases the key and its messages at once", "a1", "a2")
	wantAttempts(t, b, "a1 was abandoned once", 2, 1)

	settle(t, q, mq.Settlement{Token: b.Token, Acked: 2, Delay: long})
	put(t, q, kmsg("K", "a3"))
	b = fetchPayloads(t, q, mq.DequeueOptions{},
		"a Settle that acks every message releases nothing, so its Delay must not hold the key", "a3")

	settle(t, q, mq.Settlement{Token: b.Token, DeadLettered: 1, DeadLetterQueue: "dlq", Delay: long})
	put(t, q, kmsg("K", "a4"))
	fetchPayloads(t, q, mq.DequeueOptions{},
		"a Settle that dead-letters every message releases nothing, so its Delay must not hold the key", "a4")
}

func testLapsedBatchKeepsItsMessagesAheadOfLaterOnes(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, kmsg("K", "a1"), kmsg("K", "a2"))
	old := fetchPayloads(t, q, short, "key K", "a1", "a2")
	clk.Advance(lt / 2)
	put(t, q, kmsg("K", "a3"))
	clk.justBefore(old.LockedUntil)
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a3 waits while the batch of its key is held")
	clk.past(old.LockedUntil)
	one := mq.DequeueOptions{MaxMessages: 1}
	b := fetchPayloads(t, q, one, "after the lock lapsed, the oldest message of the key comes first, alone with MaxMessages 1", "a1")
	wantAttempts(t, b, "the lapsed fetch counted", 2)
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a2 and a3 wait behind the new batch of their key")
	wantLockLost(t, q.Ack(t.Context(), old.Token), "ack", "an Ack with the token of the lapsed batch")
	ack(t, q, b)
	b = fetchPayloads(t, q, one, "a2, of the lapsed batch, comes before the later a3", "a2")
	wantAttempts(t, b, "the lapsed fetch counted", 2)
	ack(t, q, b)
	b = fetchPayloads(t, q, one, "a3 comes last", "a3")
	wantAttempts(t, b, "a3 was never fetched", 1)
}

func testWaitingDequeueGetsTheHeldKeyWhenItsDelayEnds(t *testing.T, e env) {
	t.Parallel()
	q, clk := e.openClock(t)
	put(t, q, kmsg("K", "a"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key K", "a")
	due := clk.Now().Add(lt)
	abandon(t, q, b, mq.AbandonOptions{Delay: lt})
	put(t, q, kmsg("K", "b"))
	clk.justBefore(due)
	mustFetchNothing(t, q, mq.DequeueOptions{}, "key K is held until a's Delay ends")
	moved := pastAfter(wakeLead, clk, due)
	got, took := waitFetch(t, q, mq.DequeueOptions{Wait: 10 * wake})
	if got == nil {
		t.Fatalf("a waiting DequeueBatch returned nothing after %v although the clock passed the end of key K's Delay after %v", took, wakeLead)
	}
	if !moved.Load() {
		t.Fatalf("the waiting DequeueBatch returned %s before the clock reached the end of the Delay", describe(got))
	}
	wantPayloads(t, got, "the waiting consumer gets the key once its Delay ended, a first", "a", "b")
	if took > wake {
		t.Errorf("the waiting DequeueBatch returned %v after it started, %v after the clock passed the end of the Delay; want within %v",
			took, took-wakeLead, wake)
	}
}
