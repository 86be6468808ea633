package conformance

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// messageKeyCases: message keys (Remove, duplicates) and PurgeKey.
var messageKeyCases = []mqCase{
	{"RemoveDeletesPendingMessagesByKey", testRemoveDeletesPendingMessagesByKey},
	{"RemoveOfLockedMessageInvalidatesItsBatch", testRemoveOfLockedMessageInvalidatesItsBatch},
	{"RemoveOfEmptyKeyDeletesNoKeylessMessage", testRemoveOfEmptyKeyDeletesNoKeylessMessage},
	{"DuplicateKeyRejectsTheWholeEnqueue", testDuplicateKeyRejectsTheWholeEnqueue},
	{"DuplicateKeyCountsLockedAndDelayedMessages", testDuplicateKeyCountsLockedAndDelayedMessages},
	{"MessageKeysAreScopedToTheirQueue", testMessageKeysAreScopedToTheirQueue},
	{"MessageKeyIsReusableAfterAckOrRemove", testMessageKeyIsReusableAfterAckOrRemove},
	{"PurgeKeyDeletesEveryMessageOfTheKey", testPurgeKeyDeletesEveryMessageOfTheKey},
	{"PurgeKeyOfEmptyRoutingKeyDeletesNoUnkeyedMessage", testPurgeKeyOfEmptyRoutingKeyDeletesNoUnkeyedMessage},
	{"RemovePrefixDeletesExactlyTheKeysWithThePrefix", testRemovePrefixDeletesExactlyTheKeysWithThePrefix},
	{"KeyStatsCountOneRoutingKey", testKeyStatsCountOneRoutingKey},
}

// keyed returns a message of qn with routing key rk (may be empty) and message key k.
func keyed(rk, k, payload string) mq.Message {
	return mq.Message{Queue: qn, RoutingKey: rk, Key: k, Payload: []byte(payload)}
}

// remove calls Remove on qn and fails on error.
func remove(t *testing.T, q mq.MessageQueue, keys ...string) int {
	t.Helper()
	n, err := q.Remove(t.Context(), qn, keys...)
	if err != nil {
		t.Fatalf("Remove(%q) failed: %v", keys, err)
	}
	return n
}

func testRemoveDeletesPendingMessagesByKey(t *testing.T, e env) {
	q := e.open(t)
	put(t, q,
		keyed("", "k1", "m1"),
		mq.Message{Queue: qn, Key: "k2", Payload: []byte("m2"), Delay: long},
		msg("m3"),
		keyed("A", "k4", "m4"),
		keyed("A", "k5", "m5"),
	)
	if n := remove(t, q, "k1", "k2", "unknown", "k5"); n != 3 {
		t.Fatalf("Remove(k1, k2, unknown, k5) = %d, want 3: it counts the deleted messages and ignores unknown keys", n)
	}
	wantStats(t, q, qn, mq.Stats{Ready: 2}, "Remove deleted a ready, a delayed and a keyed message")
	fetchPayloads(t, q, mq.DequeueOptions{}, "the message without key is untouched", "m3")
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key A keeps its other message", "m4")
	if b.Messages[0].Key != "k4" {
		t.Fatalf("m4 is delivered with Key %q, want %q", b.Messages[0].Key, "k4")
	}
	if n := remove(t, q, "k1"); n != 0 {
		t.Fatalf("removing an already removed key = %d, want 0", n)
	}
	if n := remove(t, q); n != 0 {
		t.Fatalf("Remove with no keys = %d, want 0", n)
	}
}

func testRemoveOfLockedMessageInvalidatesItsBatch(t *testing.T, e env) {
	q := e.open(t)
	put(t, q,
		keyed("A", "a1", "a1"), keyed("A", "", "a2"),
		keyed("B", "b1", "b1"), keyed("B", "", "b2"),
		keyed("C", "c1", "c1"), keyed("C", "", "c2"),
		keyed("", "u", "u1"),
	)
	a := fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1", "a2")
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key B", "b1", "b2")
	c := fetchPayloads(t, q, mq.DequeueOptions{}, "key C", "c1", "c2")
	u := fetchPayloads(t, q, mq.DequeueOptions{}, "u1", "u1")
	if n := remove(t, q, "a1", "b1", "c1", "u"); n != 4 {
		t.Fatalf("Remove of four locked messages = %d, want 4: locked messages are pending too", n)
	}
	wantLockLost(t, q.Ack(t.Context(), a.Token), "ack", "the holder's Ack after one of its messages was removed")
	_, err := q.Renew(t.Context(), b.Token, long)
	wantLockLost(t, err, "renew", "the holder's Renew after one of its messages was removed")
	wantLockLost(t, q.Abandon(t.Context(), c.Token, mq.AbandonOptions{}), "abandon", "the holder's Abandon after one of its messages was removed")
	wantLockLost(t, q.Ack(t.Context(), u.Token), "ack", "the holder's Ack after its un-keyed message was removed")

	for _, p := range []string{"a2", "b2", "c2"} {
		r := fetchPayloads(t, q, mq.DequeueOptions{}, "the invalidated batch's other messages are eligible again, without the removed one", p)
		wantAttempts(t, r, "the invalidated fetch counted", 2)
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "the removed messages are gone")
}

func testRemoveOfEmptyKeyDeletesNoKeylessMessage(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("m1"), kmsg("A", "m2"))
	n, err := call2(t, "Remove", func() (int, error) { return q.Remove(t.Context(), qn, "") })
	if err != nil && !errors.Is(err, mq.ErrInvalid) {
		t.Fatalf("Remove(\"\") failed with %v, want success or ErrInvalid", err)
	}
	if n != 0 {
		t.Fatalf("Remove(\"\") = %d, want 0: messages without a key have no key to remove them by", n)
	}
	wantStats(t, q, qn, mq.Stats{Ready: 2}, "Remove(\"\") must not delete messages without a key")
}

func testDuplicateKeyRejectsTheWholeEnqueue(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, keyed("", "order-17", "first"))
	err := q.Enqueue(t.Context(), keyed("", "fresh-key", "x"), msg("plain"), keyed("A", "order-17", "dup"))
	wantErr(t, err, mq.ErrDuplicateKey, "enqueue", "an Enqueue with a key already pending in the queue")
	if !strings.Contains(err.Error(), "order-17") {
		t.Errorf("the duplicate-key error %q does not name the key %q", err, "order-17")
	}
	wantStats(t, q, qn, mq.Stats{Ready: 1}, "a rejected Enqueue stores none of its messages")

	err = q.Enqueue(t.Context(), msg("y"), keyed("", "twice", "t1"), keyed("", "twice", "t2"))
	wantErr(t, err, mq.ErrDuplicateKey, "enqueue", "an Enqueue that repeats a key")
	wantStats(t, q, qn, mq.Stats{Ready: 1}, "a rejected Enqueue stores none of its messages")

	put(t, q, keyed("", "fresh-key", "x"), keyed("", "twice", "t1"))
	fetchPayloads(t, q, mq.DequeueOptions{}, "the original keyed message is intact", "first")
	fetchPayloads(t, q, mq.DequeueOptions{}, "the keys of the rejected calls were not taken", "x")
}

func testDuplicateKeyCountsLockedAndDelayedMessages(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, keyed("", "locked", "l"), mq.Message{Queue: qn, Key: "delayed", Payload: []byte("d"), Delay: long})
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "the keyed message", "l")
	wantErr(t, q.Enqueue(t.Context(), keyed("", "locked", "l2")), mq.ErrDuplicateKey, "enqueue",
		"a locked message is still pending: its key cannot be reused")
	wantErr(t, q.Enqueue(t.Context(), keyed("", "delayed", "d2")), mq.ErrDuplicateKey, "enqueue",
		"a delayed message is pending: its key cannot be reused")
	abandon(t, q, b, mq.AbandonOptions{})
	wantErr(t, q.Enqueue(t.Context(), keyed("", "locked", "l3")), mq.ErrDuplicateKey, "enqueue",
		"an abandoned message is still pending: its key cannot be reused")
	wantStats(t, q, qn, mq.Stats{Ready: 1, Delayed: 1}, "rejected Enqueues store nothing")
}

func testMessageKeysAreScopedToTheirQueue(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, mq.Message{Queue: "q1", Key: "k", Payload: []byte("1")}, mq.Message{Queue: "q2", Key: "k", Payload: []byte("2")})
	n, err := q.Remove(t.Context(), "q1", "k")
	if err != nil || n != 1 {
		t.Fatalf("Remove(q1, k) = %d, %v; want 1, nil", n, err)
	}
	wantStats(t, q, "q1", mq.Stats{}, "the message of q1 was removed")
	wantStats(t, q, "q2", mq.Stats{Ready: 1}, "Remove on q1 must not delete the message with the same key in q2")
}

func testMessageKeyIsReusableAfterAckOrRemove(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, keyed("", "k", "1"))
	ack(t, q, fetchPayloads(t, q, mq.DequeueOptions{}, "first", "1"))
	put(t, q, keyed("", "k", "2"))
	if n := remove(t, q, "k"); n != 1 {
		t.Fatalf("Remove(k) = %d, want 1", n)
	}
	put(t, q, keyed("", "k", "3"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "the key was reused after the ack and after the removal", "3")
	if b.Messages[0].Key != "k" {
		t.Fatalf("the message is delivered with Key %q, want \"k\"", b.Messages[0].Key)
	}
}

func testPurgeKeyDeletesEveryMessageOfTheKey(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"))
	held := fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1")
	put(t, q, kmsg("A", "a2"), mq.Message{Queue: qn, RoutingKey: "A", Payload: []byte("a3"), Delay: long},
		kmsg("B", "b1"), msg("u1"), mq.Message{Queue: "other", RoutingKey: "A", Payload: []byte("o1")})
	n, err := q.PurgeKey(t.Context(), qn, "A")
	if err != nil || n != 3 {
		t.Fatalf("PurgeKey(A) = %d, %v; want 3, nil: it deletes the locked, the ready and the delayed message of the key", n, err)
	}
	wantLockLost(t, q.Ack(t.Context(), held.Token), "ack", "the holder's Ack after PurgeKey deleted its messages")
	wantStats(t, q, qn, mq.Stats{Ready: 2}, "only key B's and the un-keyed message remain")
	wantStats(t, q, "other", mq.Stats{Ready: 1}, "PurgeKey must not touch key A of another queue")
	put(t, q, kmsg("A", "a4"))
	var got []string
	for {
		b := fetch(t, q, mq.DequeueOptions{})
		if b == nil {
			break
		}
		got = append(got, payloads(b)...)
	}
	if want := []string{"b1", "u1", "a4"}; !equalStrings(got, want) {
		t.Fatalf("after PurgeKey(A) the queue delivered %q, want %q: key A's lock ended with the purge", got, want)
	}
	if n, err := q.PurgeKey(t.Context(), qn, "unknown"); err != nil || n != 0 {
		t.Fatalf("PurgeKey of an unknown key = %d, %v; want 0, nil", n, err)
	}
}

func testPurgeKeyOfEmptyRoutingKeyDeletesNoUnkeyedMessage(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("u1"), msg("u2"))
	n, err := call2(t, "PurgeKey", func() (int, error) { return q.PurgeKey(t.Context(), qn, "") })
	if err != nil && !errors.Is(err, mq.ErrInvalid) {
		t.Fatalf("PurgeKey(\"\") failed with %v, want success or ErrInvalid", err)
	}
	if n != 0 {
		t.Fatalf("PurgeKey(\"\") = %d, want 0: un-keyed messages have no routing key", n)
	}
	wantStats(t, q, qn, mq.Stats{Ready: 2}, "PurgeKey(\"\") must not delete un-keyed messages")
}

func testRemovePrefixDeletesExactlyTheKeysWithThePrefix(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, keyed("", "job/1", "j1"), keyed("", "job/2", "j2"), keyed("", "job/3", "j3"),
		keyed("", "jobs/1", "other"), keyed("", "jo", "short"), keyed("", "", "keyless"))
	locked := fetchPayloads(t, q, mq.DequeueOptions{}, "the first job", "j1")
	n, err := q.RemovePrefix(t.Context(), qn, "job/")
	if err != nil || n != 3 {
		t.Fatalf("RemovePrefix(job/) = %d, %v; want 3 (two pending, one locked)", n, err)
	}
	wantLockLost(t, q.Ack(t.Context(), locked.Token), "ack", "the holder's Ack after RemovePrefix removed its message")
	for _, p := range []string{"other", "short", "keyless"} {
		fetchPayloads(t, q, mq.DequeueOptions{}, "messages whose key lacks the prefix stay", p)
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "the prefixed messages are gone")
	_, err = q.RemovePrefix(t.Context(), qn, "")
	wantErr(t, err, mq.ErrInvalid, "remove prefix", "an empty prefix would match every keyed message")
}

func testKeyStatsCountOneRoutingKey(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, kmsg("A", "a1"), kmsg("A", "a2"), kmsg("B", "b1"), msg("u1"))
	put(t, q, mq.Message{Queue: qn, RoutingKey: "A", Payload: []byte("later"), Delay: long})
	st, err := q.KeyStats(t.Context(), qn, "A")
	next, oldest := st.NextVisible, st.OldestReady
	if st.NextVisible, st.OldestReady = (time.Time{}), (time.Time{}); err != nil || st != (mq.Stats{Ready: 2, Delayed: 1}) {
		t.Fatalf("KeyStats(A) = %+v (next visible %v), %v; want 2 ready and 1 delayed", st, next, err)
	}
	wantTime(t, next, clk.Now().Add(long), "KeyStats(A).NextVisible (the delayed message's visibility)")
	wantTime(t, oldest, clk.Now(), "KeyStats(A).OldestReady (a1's enqueue)")
	clk.Advance(time.Second) // the abandon below comes after the enqueue of b1 and u1
	a := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key A", "a1", "a2")
	st, err = q.KeyStats(t.Context(), qn, "A")
	if st.NextVisible = (time.Time{}); err != nil || st != (mq.Stats{Locked: 2, Delayed: 1, MaxAttempt: 1}) {
		t.Fatalf("KeyStats(A) while locked = %+v, %v; want 2 locked and 1 delayed, max attempt 1", st, err)
	}
	if err := q.Abandon(t.Context(), a.Token, mq.AbandonOptions{}); err != nil {
		t.Fatal(err)
	}
	// Abandoned messages become visible now, behind the older b1 and u1.
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key B", "b1")
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u1", "u1")
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key A again", "a1", "a2")
	if st, err = q.KeyStats(t.Context(), qn, "A"); err != nil || st.MaxAttempt != 2 {
		t.Fatalf("KeyStats(A) after a second fetch = %+v, %v; want max attempt 2", st, err)
	}
	st, err = q.KeyStats(t.Context(), qn, "none")
	if err != nil || st != (mq.Stats{}) {
		t.Fatalf("KeyStats of a key without messages = %+v, %v; want zero", st, err)
	}
}
