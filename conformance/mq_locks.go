package conformance

import (
	"slices"
	"testing"

	"github.com/duroq/duroq/mq"
)

// lockCases: lock expiry, renew, abandon, attempt counts.
var lockCases = []mqCase{
	{"LockDescribesALiveLockAndFailsOnALostOne", testLockDescribesALiveLockAndFailsOnALostOne},
	{"LockExpiryRedeliversWithNewTokenAndNextAttempt", testLockExpiryRedeliversWithNewTokenAndNextAttempt},
	{"AckAfterLockExpiryFailsAndChangesNothing", testAckAfterLockExpiryFailsAndChangesNothing},
	{"UnknownOrEmptyTokenFailsAndKeepsLiveLock", testUnknownOrEmptyTokenFailsAndKeepsLiveLock},
	{"AckTwiceFails", testAckTwiceFails},
	{"RenewExtendsLiveLock", testRenewExtendsLiveLock},
	{"RenewFailsOnLostLock", testRenewFailsOnLostLock},
	{"AbandonReleasesImmediately", testAbandonReleasesImmediately},
	{"AbandonWithDelayHidesMessagesUntilDue", testAbandonWithDelayHidesMessagesUntilDue},
	{"AbandonWithDelayAndReleaseKeyUnlocksTheKey", testAbandonWithDelayAndReleaseKeyUnlocksTheKey},
	{"AbandonIgnoreAttemptDoesNotCountTheFetch", testAbandonIgnoreAttemptDoesNotCountTheFetch},
	{"AbandonWithLostTokenFailsAndChangesNothing", testAbandonWithLostTokenFailsAndChangesNothing},
	{"AttemptCountsAndMaxAttempt", testAttemptCountsAndMaxAttempt},
}

func testLockExpiryRedeliversWithNewTokenAndNextAttempt(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, kmsg("A", "a1"), kmsg("A", "a2"), msg("u1"))
	old := fetchPayloads(t, q, short, "key A", "a1", "a2")
	oldU := fetchPayloads(t, q, short, "u1", "u1")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "while the locks are live nobody else gets their messages")
	clk.justBefore(old.LockedUntil)
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a lock holds until its LockedUntil")
	clk.past(old.LockedUntil)

	b := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "after the lock lapses the key's messages are fetchable again", "a1", "a2")
	wantAttempts(t, b, "a redelivery after a lapsed lock counts as a new attempt", 2, 2)
	if b.MaxAttempt() != 2 {
		t.Errorf("MaxAttempt of %s is %d, want 2", describe(b), b.MaxAttempt())
	}
	if b.Token == old.Token {
		t.Fatalf("the batch fetched after the lock lapsed reuses the old token %q", old.Token)
	}
	u := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "after its lock lapses the un-keyed message is fetchable again", "u1")
	wantAttempts(t, u, "second fetch of u1", 2)
	if u.Token == oldU.Token {
		t.Fatalf("the un-keyed batch fetched after the lock lapsed reuses the old token %q", oldU.Token)
	}

	wantLockLost(t, q.Ack(t.Context(), old.Token), "ack", "an Ack with the token of a lapsed lock whose messages were refetched")
	wantLockLost(t, q.Abandon(t.Context(), old.Token, mq.AbandonOptions{}), "abandon", "an Abandon with the token of a lapsed, refetched lock")
	_, err := q.Renew(t.Context(), old.Token, long)
	wantLockLost(t, err, "renew", "a Renew with the token of a lapsed, refetched lock")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "the failed calls with the old token must leave the new holder's locks in place")
	ack(t, q, b)
	ack(t, q, u)
	wantEmpty(t, q, qn, "the new holders acked")
}

func testAckAfterLockExpiryFailsAndChangesNothing(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, kmsg("A", "a1"), msg("u1"))
	a := fetchPayloads(t, q, short, "key A", "a1")
	u := fetchPayloads(t, q, short, "u1", "u1")
	clk.past(a.LockedUntil)

	wantLockLost(t, q.Ack(t.Context(), a.Token), "ack", "an Ack after the lock lapsed must fail even though nobody refetched the messages")
	wantLockLost(t, q.Ack(t.Context(), u.Token), "ack", "an Ack after the lock lapsed must fail even though nobody refetched the message")
	wantStats(t, q, qn, mq.Stats{Ready: 2}, "a failed Ack deletes nothing")
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "the messages of a failed Ack are fetchable again", "a1")
	wantAttempts(t, b, "second fetch", 2)
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "the messages of a failed Ack are fetchable again", "u1")
	wantAttempts(t, b, "second fetch", 2)
}

func testUnknownOrEmptyTokenFailsAndKeepsLiveLock(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1")
	for _, tok := range []string{"", "no-such-token", b.Token + "x", "00000000-0000-0000-0000-000000000000"} {
		wantLockLost(t, q.Ack(t.Context(), tok), "ack", "an Ack with an unknown or empty token")
		wantLockLost(t, q.Abandon(t.Context(), tok, mq.AbandonOptions{}), "abandon", "an Abandon with an unknown or empty token")
		_, err := q.Renew(t.Context(), tok, long)
		wantLockLost(t, err, "renew", "a Renew with an unknown or empty token")
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "failed calls with other tokens must leave the live lock held")
	wantStats(t, q, qn, mq.Stats{Locked: 1}, "a1 is still locked")
	ack(t, q, b)
	wantEmpty(t, q, qn, "the real holder acked")
}

func testAckTwiceFails(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"))
	a := fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1")
	ack(t, q, a)
	put(t, q, kmsg("A", "a2"))
	wantLockLost(t, q.Ack(t.Context(), a.Token), "ack", "a second Ack of the same token")
	wantStats(t, q, qn, mq.Stats{Ready: 1}, "the second Ack must not delete the key's new message")
	fetchPayloads(t, q, mq.DequeueOptions{}, "the key is unlocked after the first Ack", "a2")
}

func testRenewExtendsLiveLock(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, kmsg("A", "a1"), msg("u1"))
	b := fetchPayloads(t, q, short, "key A", "a1")
	u := fetchPayloads(t, q, short, "u1", "u1")
	clk.Advance(lt / 2)
	renewed := clk.Now()
	until, err := q.Renew(t.Context(), b.Token, 4*lt)
	if err != nil {
		t.Fatalf("Renew of a live lock failed: %v", err)
	}
	if _, err := q.Renew(t.Context(), u.Token, 4*lt); err != nil {
		t.Fatalf("Renew of a live lock failed: %v", err)
	}
	wantTime(t, until, renewed.Add(4*lt), "the expiry Renew returns (now plus the extension)")
	clk.past(b.LockedUntil)
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a renewed lock must still hold after the original lock timeout elapsed")
	put(t, q, kmsg("A", "a2"))
	clk.justBefore(renewed.Add(4 * lt))
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a message arriving while the renewed lock holds must not be delivered")
	if err := q.Ack(t.Context(), b.Token); err != nil {
		t.Fatalf("Ack of a renewed lock after its original timeout failed: %v", err)
	}
	if err := q.Ack(t.Context(), u.Token); err != nil {
		t.Fatalf("Ack of a renewed un-keyed lock after its original timeout failed: %v", err)
	}
	fetchPayloads(t, q, mq.DequeueOptions{}, "the message that arrived during the renewed lock is delivered after its Ack", "a2")
}

func testRenewFailsOnLostLock(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, msg("u1"), msg("u2"), msg("u3"))
	lapsing := fetchPayloads(t, q, short, "u1", "u1")
	acked := fetchPayloads(t, q, mq.DequeueOptions{}, "u2", "u2")
	abandoned := fetchPayloads(t, q, mq.DequeueOptions{}, "u3", "u3")

	ack(t, q, acked)
	_, err := q.Renew(t.Context(), acked.Token, long)
	wantLockLost(t, err, "renew", "a Renew after the Ack")
	abandon(t, q, abandoned, mq.AbandonOptions{Delay: long})
	_, err = q.Renew(t.Context(), abandoned.Token, long)
	wantLockLost(t, err, "renew", "a Renew after the Abandon")
	wantStats(t, q, qn, mq.Stats{Delayed: 1, Locked: 1}, "u3 is delayed and u1 locked: the failed Renew must not re-lock the abandoned message")

	clk.past(lapsing.LockedUntil)
	_, err = q.Renew(t.Context(), lapsing.Token, long)
	wantLockLost(t, err, "renew", "a Renew after the lock lapsed must not resurrect it, even though nobody refetched")
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "the message whose Renew failed is fetchable", "u1")
	wantAttempts(t, b, "second fetch", 2)
}

func testAbandonReleasesImmediately(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"), kmsg("A", "a2"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1", "a2")
	abandon(t, q, b, mq.AbandonOptions{})
	wantStats(t, q, qn, mq.Stats{Ready: 2}, "abandoned messages are ready at once")
	b2 := fetchPayloads(t, q, mq.DequeueOptions{}, "an abandoned batch is fetchable at once", "a1", "a2")
	wantAttempts(t, b2, "second fetch", 2, 2)
	if b2.Token == b.Token {
		t.Fatalf("the refetched batch reuses the abandoned token %q", b.Token)
	}
	wantLockLost(t, q.Ack(t.Context(), b.Token), "ack", "an Ack with the token of an abandoned batch")
	ack(t, q, b2)
}

func testAbandonWithDelayHidesMessagesUntilDue(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, kmsg("A", "a1"), msg("u1"), msg("u2"))
	a := fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1")
	u := fetchPayloads(t, q, mq.DequeueOptions{}, "u1", "u1")
	due := clk.Now().Add(lt)
	abandon(t, q, a, mq.AbandonOptions{Delay: lt})
	abandon(t, q, u, mq.AbandonOptions{Delay: lt})
	fetchPayloads(t, q, mq.DequeueOptions{}, "the next fetch skips the delayed abandoned messages", "u2")
	clk.justBefore(due)
	mustFetchNothing(t, q, mq.DequeueOptions{}, "messages abandoned with a Delay stay invisible until it passed")
	clk.past(due)
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "abandoned messages are visible once the Delay passed", "a1")
	wantAttempts(t, b, "second fetch", 2)
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "abandoned messages are visible once the Delay passed", "u1")
	wantAttempts(t, b, "second fetch", 2)
}

func testAbandonWithDelayAndReleaseKeyUnlocksTheKey(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1")
	abandon(t, q, b, mq.AbandonOptions{Delay: long, ReleaseKey: true})
	put(t, q, kmsg("A", "a2"))
	fetchPayloads(t, q, mq.DequeueOptions{},
		"Abandon with ReleaseKey unlocks the key: its new visible message is fetchable while the abandoned one stays delayed", "a2")
	wantStats(t, q, qn, mq.Stats{Delayed: 1, Locked: 1}, "a1 is delayed, a2 locked")
}

func testAbandonIgnoreAttemptDoesNotCountTheFetch(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"), msg("u1"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1")
	u := fetchPayloads(t, q, mq.DequeueOptions{}, "u1", "u1")
	abandon(t, q, b, mq.AbandonOptions{IgnoreAttempt: true})
	abandon(t, q, u, mq.AbandonOptions{IgnoreAttempt: true})
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "key A again", "a1")
	wantAttempts(t, b, "Abandon with IgnoreAttempt undoes the count of the abandoned fetch", 1)
	u = fetchPayloads(t, q, mq.DequeueOptions{}, "u1 again", "u1")
	wantAttempts(t, u, "Abandon with IgnoreAttempt undoes the count of the abandoned fetch", 1)
	abandon(t, q, b, mq.AbandonOptions{})
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "key A again", "a1")
	wantAttempts(t, b, "a plain Abandon keeps the count", 2)
	abandon(t, q, b, mq.AbandonOptions{IgnoreAttempt: true})
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "key A again", "a1")
	wantAttempts(t, b, "IgnoreAttempt undoes only the abandoned fetch", 2)
}

func testAbandonWithLostTokenFailsAndChangesNothing(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, msg("u1"), msg("u2"))
	lapsing := fetchPayloads(t, q, short, "u1", "u1")
	acked := fetchPayloads(t, q, mq.DequeueOptions{}, "u2", "u2")
	ack(t, q, acked)
	wantLockLost(t, q.Abandon(t.Context(), acked.Token, mq.AbandonOptions{}), "abandon", "an Abandon after the Ack")
	wantStats(t, q, qn, mq.Stats{Locked: 1}, "only u1 is left, locked: a failed Abandon must not bring an acked message back")
	clk.past(lapsing.LockedUntil)
	wantLockLost(t, q.Abandon(t.Context(), lapsing.Token, mq.AbandonOptions{IgnoreAttempt: true, Delay: long}),
		"abandon", "an Abandon after the lock lapsed")
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "a failed Abandon with a Delay must not delay the message", "u1")
	wantAttempts(t, b, "a failed Abandon with IgnoreAttempt must not undo the attempt", 2)
}

func testAttemptCountsAndMaxAttempt(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"), kmsg("A", "a2"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1", "a2")
	wantAttempts(t, b, "first fetch", 1, 1)
	abandon(t, q, b, mq.AbandonOptions{})
	put(t, q, kmsg("A", "a3"))

	b = fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1", "a2", "a3")
	wantAttempts(t, b, "the old messages are on their second fetch, the new one on its first", 2, 2, 1)
	if b.MaxAttempt() != 2 {
		t.Fatalf("MaxAttempt of %s is %d, want 2 (the largest attempt in the batch)", describe(b), b.MaxAttempt())
	}
	abandon(t, q, b, mq.AbandonOptions{IgnoreAttempt: true})
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1", "a2", "a3")
	wantAttempts(t, b, "IgnoreAttempt undid the previous fetch for every message", 2, 2, 1)
	abandon(t, q, b, mq.AbandonOptions{})
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1", "a2", "a3")
	wantAttempts(t, b, "every fetch counts", 3, 3, 2)
	if b.MaxAttempt() != 3 {
		t.Fatalf("MaxAttempt of %s is %d, want 3", describe(b), b.MaxAttempt())
	}
	ids1 := ids(b)
	abandon(t, q, b, mq.AbandonOptions{})
	b = mustFetch(t, q, mq.DequeueOptions{}, "key A")
	if !slices.Equal(ids(b), ids1) {
		t.Fatalf("a refetch after Abandon returned IDs %v, want the same messages %v", ids(b), ids1)
	}
}

func testLockDescribesALiveLockAndFailsOnALostOne(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"), kmsg("A", "a2"), msg("u1"))
	b := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key A", "a1", "a2")
	li, err := q.Lock(t.Context(), b.Token)
	if err != nil || li.Queue != qn || li.RoutingKey != "A" || li.Messages != 2 || !li.LockedUntil.Equal(b.LockedUntil) {
		t.Fatalf("Lock of a live batch = %+v, %v; want queue %q, key A, 2 messages, until %v", li, err, qn, b.LockedUntil)
	}
	u := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u1", "u1")
	if li, err := q.Lock(t.Context(), u.Token); err != nil || li.RoutingKey != "" || li.Messages != 1 {
		t.Fatalf("Lock of an un-keyed batch = %+v, %v; want no key and 1 message", li, err)
	}
	if err := q.Ack(t.Context(), b.Token); err != nil {
		t.Fatal(err)
	}
	_, err = q.Lock(t.Context(), b.Token)
	wantLockLost(t, err, "lock", "Lock of an acked batch")
	_, err = q.Lock(t.Context(), "no-such-token")
	wantLockLost(t, err, "lock", "Lock of an unknown token")
}
