package conformance

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// sessionCases: session affinity (duroxide's session scenarios at queue level).
var sessionCases = []mqCase{
	{"SessionNilOptionsGetOnlySessionlessMessages", testSessionNilOptionsGetOnlySessionlessMessages},
	{"SessionFetchClaimsUnownedSession", testSessionFetchClaimsUnownedSession},
	{"SessionOwnerKeepsSessionAfterAck", testSessionOwnerKeepsSessionAfterAck},
	{"SessionDifferentSessionsDifferentOwners", testSessionDifferentSessionsDifferentOwners},
	{"SessionOtherOwnerStillGetsSessionlessMessages", testSessionOtherOwnerStillGetsSessionlessMessages},
	{"SessionClaimableByAnotherOwnerAfterLeaseLapses", testSessionClaimableByAnotherOwnerAfterLeaseLapses},
	{"SessionOriginalOwnerReclaimsAfterLeaseLapses", testSessionOriginalOwnerReclaimsAfterLeaseLapses},
	{"SessionSameOwnerSharedAcrossGoroutines", testSessionSameOwnerSharedAcrossGoroutines},
	{"SessionItemsFIFOForOwner", testSessionItemsFIFOForOwner},
	{"SessionOwnerGetsAllSessionsFIFO", testSessionOwnerGetsAllSessionsFIFO},
	{"SessionRenewCountsLiveLeasesOfListedOwners", testSessionRenewCountsLiveLeasesOfListedOwners},
	{"SessionRenewSkipsIdleSessions", testSessionRenewSkipsIdleSessions},
	{"SessionRenewDoesNotResurrectLapsedLease", testSessionRenewDoesNotResurrectLapsedLease},
	{"SessionRenewExtendsOnlyListedOwnersLeases", testSessionRenewExtendsOnlyListedOwnersLeases},
	{"SessionAckCountsAsActivity", testSessionAckCountsAsActivity},
	{"SessionRenewOfMessageLockCountsAsActivity", testSessionRenewOfMessageLockCountsAsActivity},
	{"SessionCleanupForgetsLapsedIdleSessions", testSessionCleanupForgetsLapsedIdleSessions},
	{"SessionCleanupKeepsSessionsWithPendingMessages", testSessionCleanupKeepsSessionsWithPendingMessages},
	{"SessionCleanupKeepsLiveSessions", testSessionCleanupKeepsLiveSessions},
	{"SessionAbandonedMessageIsRetriedByOwner", testSessionAbandonedMessageIsRetriedByOwner},
	{"SessionMessageLockLapseRedeliversToOwner", testSessionMessageLockLapseRedeliversToOwner},
	{"SessionAckSucceedsAfterLeaseLapses", testSessionAckSucceedsAfterLeaseLapses},
	{"SessionNewOwnerTakesOverAfterLeaseLapses", testSessionNewOwnerTakesOverAfterLeaseLapses},
	{"SessionBothLocksLapseAnotherOwnerGetsRedelivery", testSessionBothLocksLapseAnotherOwnerGetsRedelivery},
}

const (
	ownerA = "owner-a"
	ownerB = "owner-b"
	ownerC = "owner-c"
)

// smsg is a message of qn bound to session.
func smsg(session, payload string) mq.Message {
	return mq.Message{Queue: qn, Session: session, Payload: []byte(payload)}
}

// as returns options acting for owner with a long lease and a long lock.
func as(owner string) mq.DequeueOptions { return withSession(owner, long) }

// renewSessions calls RenewSessions on qn and fails on error.
func renewSessions(t *testing.T, q mq.MessageQueue, owners []string, extend, idle time.Duration) int {
	t.Helper()
	n, err := q.RenewSessions(t.Context(), qn, owners, extend, idle)
	if err != nil {
		t.Fatalf("RenewSessions(%q) failed: %v", owners, err)
	}
	return n
}

// cleanupSessions calls CleanupSessions on qn and fails on error.
func cleanupSessions(t *testing.T, q mq.MessageQueue) int {
	t.Helper()
	n, err := q.CleanupSessions(t.Context(), qn)
	if err != nil {
		t.Fatalf("CleanupSessions failed: %v", err)
	}
	return n
}

// wantSession fails unless b is the single message p of session s.
func wantSession(t *testing.T, b *mq.Batch, s, p, rule string) {
	t.Helper()
	wantPayloads(t, b, rule, p)
	if got := b.Messages[0].Session; got != s {
		t.Fatalf("%s: message %q is delivered with Session %q, want %q", rule, p, got, s)
	}
	if b.RoutingKey != "" {
		t.Fatalf("%s: a session message is delivered with RoutingKey %q", rule, b.RoutingKey)
	}
}

func testSessionNilOptionsGetOnlySessionlessMessages(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, smsg("s1", "s1-1"), msg("plain"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "a consumer without session options skips session messages", "plain")
	if b.Messages[0].Session != "" {
		t.Fatalf("the plain message is delivered with Session %q", b.Messages[0].Session)
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a consumer without session options never gets a session message")
	s := mustFetch(t, q, as(ownerA), "a consumer with session options gets the session message")
	wantSession(t, s, "s1", "s1-1", "claimed session message")
}

func testSessionFetchClaimsUnownedSession(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, smsg("s1", "s1-1"), smsg("s1", "s1-2"))
	wantSession(t, mustFetch(t, q, as(ownerA), "unowned session"), "s1", "s1-1", "fetching a message of an unowned session claims it")
	mustFetchNothing(t, q, as(ownerB), "owner-b must not receive a message of session s1, which owner-a claimed")
	wantSession(t, mustFetch(t, q, as(ownerA), "owned session"), "s1", "s1-2", "the owner gets the next message of its session")
}

func testSessionOwnerKeepsSessionAfterAck(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, smsg("s1", "s1-1"))
	b := mustFetch(t, q, as(ownerA), "unowned session")
	ack(t, q, b)
	put(t, q, smsg("s1", "s1-2"))
	mustFetchNothing(t, q, as(ownerB), "owner-b must not receive a message of session s1 while owner-a's lease is live, even after owner-a acked")
	wantSession(t, mustFetch(t, q, as(ownerA), "owned session"), "s1", "s1-2", "session affinity: the owner gets the session's next message")
}

func testSessionDifferentSessionsDifferentOwners(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, smsg("s1", "s1-1"), smsg("s2", "s2-1"))
	a := mustFetch(t, q, as(ownerA), "s1")
	wantSession(t, a, "s1", "s1-1", "owner-a claims s1")
	b := mustFetch(t, q, as(ownerB), "s2")
	wantSession(t, b, "s2", "s2-1", "owner-b claims s2")
	ack(t, q, a)
	ack(t, q, b)
	put(t, q, smsg("s1", "s1-2"), smsg("s2", "s2-2"))
	wantSession(t, mustFetch(t, q, as(ownerA), "s1"), "s1", "s1-2", "owner-a gets its own session's message")
	mustFetchNothing(t, q, as(ownerA), "owner-a must not receive a message of session s2, which owner-b holds")
	wantSession(t, mustFetch(t, q, as(ownerB), "s2"), "s2", "s2-2", "owner-b gets its own session's message")
}

func testSessionOtherOwnerStillGetsSessionlessMessages(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, smsg("s1", "s1-1"))
	ack(t, q, mustFetch(t, q, as(ownerA), "s1"))
	put(t, q, smsg("s1", "s1-2"), msg("plain"))
	b := fetchPayloads(t, q, as(ownerB), "a consumer with session options also gets session-less messages", "plain")
	if b.Messages[0].Session != "" {
		t.Fatalf("the plain message is delivered with Session %q", b.Messages[0].Session)
	}
	mustFetchNothing(t, q, as(ownerB), "owner-b must not receive a message of owner-a's session")
	wantSession(t, mustFetch(t, q, as(ownerA), "s1"), "s1", "s1-2", "owner-a gets its session's message")
}

func testSessionClaimableByAnotherOwnerAfterLeaseLapses(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, smsg("s1", "s1-1"))
	lease := clk.Now().Add(lt)
	ack(t, q, mustFetch(t, q, withSession(ownerA, lt), "s1"))
	put(t, q, smsg("s1", "s1-2"))
	clk.justBefore(lease)
	mustFetchNothing(t, q, as(ownerB), "owner-b must not receive a message of session s1 while owner-a's lease is live")
	clk.past(lease)
	wantSession(t, mustFetch(t, q, as(ownerB), "lapsed session"), "s1", "s1-2", "after owner-a's lease lapsed, owner-b can claim session s1")
	put(t, q, smsg("s1", "s1-3"))
	mustFetchNothing(t, q, as(ownerA), "owner-b now holds session s1 with a long lease; owner-a must not receive its messages")
}

func testSessionOriginalOwnerReclaimsAfterLeaseLapses(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, smsg("s1", "s1-1"))
	lease := clk.Now().Add(lt)
	ack(t, q, mustFetch(t, q, withSession(ownerA, lt), "s1"))
	clk.past(lease)
	put(t, q, smsg("s1", "s1-2"))
	wantSession(t, mustFetch(t, q, as(ownerA), "lapsed session"), "s1", "s1-2", "the original owner can re-claim its lapsed session")
	put(t, q, smsg("s1", "s1-3"))
	mustFetchNothing(t, q, as(ownerB), "owner-a re-claimed session s1; owner-b must not receive its messages")
}

func testSessionSameOwnerSharedAcrossGoroutines(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, smsg("s1", "s1-1"), smsg("s1", "s1-2"), smsg("s1", "s1-3"))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		got   []string
		start = make(chan struct{})
	)
	for range 2 {
		wg.Go(func() {
			<-start
			b, err := q.DequeueBatch(t.Context(), qn, as("process-1"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("DequeueBatch for owner process-1 failed: %v", err)
			case b == nil:
				t.Errorf("two goroutines of owner process-1 fetched at once: one got nothing, but an owner's goroutines share its sessions")
			default:
				got = append(got, payloads(b)...)
			}
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"s1-1", "s1-2"}) {
		t.Fatalf("two goroutines of one owner got %q, want the first two messages of the session", got)
	}
	mustFetchNothing(t, q, as(ownerB), "another owner must not receive a message of process-1's session")
	wantSession(t, mustFetch(t, q, as("process-1"), "s1"), "s1", "s1-3", "a third fetch by the owner gets the third message")
}

func testSessionItemsFIFOForOwner(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, smsg("s1", "1"), smsg("s1", "2"))
	put(t, q, smsg("s1", "3"))
	for _, p := range []string{"1", "2", "3"} {
		wantSession(t, mustFetch(t, q, as(ownerA), "s1"), "s1", p, "the owner gets its session's messages one at a time in FIFO order")
	}
	mustFetchNothing(t, q, as(ownerA), "all messages of s1 are locked")
}

func testSessionOwnerGetsAllSessionsFIFO(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, smsg("s1", "1"), smsg("s2", "2"), smsg("s3", "3"), msg("4"))
	for _, p := range []string{"1", "2", "3", "4"} {
		b := fetchPayloads(t, q, as(ownerA), "one owner may claim any number of sessions; messages come in FIFO order", p)
		ack(t, q, b)
	}
	mustFetchNothing(t, q, as(ownerA), "every message was acked")
}

func testSessionRenewCountsLiveLeasesOfListedOwners(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, smsg("s1", "1"), smsg("s2", "2"), smsg("s3", "3"))
	ack(t, q, mustFetch(t, q, as(ownerA), "s1"))
	if n := renewSessions(t, q, []string{ownerA}, long, long); n != 1 {
		t.Fatalf("RenewSessions(owner-a) = %d, want 1: owner-a holds one live, active session", n)
	}
	ack(t, q, mustFetch(t, q, as(ownerA), "s2"))
	if n := renewSessions(t, q, []string{ownerA}, long, long); n != 2 {
		t.Fatalf("RenewSessions(owner-a) = %d, want 2: owner-a holds two live, active sessions", n)
	}
	if n := renewSessions(t, q, []string{ownerB}, long, long); n != 0 {
		t.Fatalf("RenewSessions(owner-b) = %d, want 0: owner-b holds no session", n)
	}
	if n := renewSessions(t, q, nil, long, long); n != 0 {
		t.Fatalf("RenewSessions with no owners = %d, want 0", n)
	}
	ack(t, q, mustFetch(t, q, as(ownerB), "s3"))
	if n := renewSessions(t, q, []string{ownerA, ownerB}, long, long); n != 3 {
		t.Fatalf("RenewSessions(owner-a, owner-b) = %d, want 3", n)
	}
	n, err := q.RenewSessions(t.Context(), "other", []string{ownerA, ownerB}, long, long)
	if err != nil || n != 0 {
		t.Fatalf("RenewSessions on another queue = %d, %v; want 0, nil: sessions belong to their queue", n, err)
	}
}

func testSessionRenewSkipsIdleSessions(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, smsg("s1", "1"))
	ack(t, q, mustFetch(t, q, as(ownerA), "s1"))
	active := clk.Now()
	clk.justBefore(active.Add(lt))
	if n := renewSessions(t, q, []string{ownerA}, long, lt); n != 1 {
		t.Fatalf("RenewSessions(idle %v) = %d, want 1: the session's last activity is within idle", lt, n)
	}
	clk.past(active.Add(lt))
	if n := renewSessions(t, q, []string{ownerA}, long, lt); n != 0 {
		t.Fatalf("RenewSessions(idle %v) = %d, want 0: the session saw no activity for longer than idle (a renewal is no activity)", lt, n)
	}
	if n := renewSessions(t, q, []string{ownerA}, long, long); n != 1 {
		t.Fatalf("RenewSessions(idle %v) = %d, want 1: the session's last activity is within idle", long, n)
	}
}

func testSessionRenewDoesNotResurrectLapsedLease(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, smsg("s1", "1"))
	lease := clk.Now().Add(lt)
	ack(t, q, mustFetch(t, q, withSession(ownerA, lt), "s1"))
	clk.past(lease)
	if n := renewSessions(t, q, []string{ownerA}, long, long); n != 0 {
		t.Fatalf("RenewSessions after the lease lapsed = %d, want 0: a lapsed lease is not renewed", n)
	}
	put(t, q, smsg("s1", "2"))
	wantSession(t, mustFetch(t, q, as(ownerB), "s1"), "s1", "2", "the failed renewal must not resurrect owner-a's lapsed lease")
}

func testSessionRenewExtendsOnlyListedOwnersLeases(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, smsg("s1", "s1-1"), smsg("s2", "s2-1"))
	lease := clk.Now().Add(lt)
	ack(t, q, mustFetch(t, q, withSession(ownerA, lt), "s1"))
	ack(t, q, mustFetch(t, q, withSession(ownerC, lt), "s2"))
	clk.Advance(lt / 2)
	renewed := clk.Now()
	if n := renewSessions(t, q, []string{ownerA}, 4*lt, long); n != 1 {
		t.Fatalf("RenewSessions(owner-a) = %d, want 1", n)
	}
	clk.past(lease)
	put(t, q, smsg("s1", "s1-2"), smsg("s2", "s2-2"))
	wantSession(t, mustFetch(t, q, as(ownerB), "s2"), "s2", "s2-2",
		"owner-c was not listed, so its lease lapsed on time and owner-b can claim s2")
	clk.justBefore(renewed.Add(4 * lt))
	mustFetchNothing(t, q, as(ownerB),
		"owner-a's renewed lease must hold past its original timeout: owner-b must not receive a message of s1")
	wantSession(t, mustFetch(t, q, as(ownerA), "s1"), "s1", "s1-2", "owner-a still holds s1")
}

func testSessionAckCountsAsActivity(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, smsg("active", "1"), smsg("idle", "2"))
	b := mustFetch(t, q, as(ownerA), "session active")
	ack(t, q, mustFetch(t, q, as(ownerA), "session idle"))
	clk.past(clk.Now().Add(lt))
	ack(t, q, b)
	if n := renewSessions(t, q, []string{ownerA}, long, lt); n != 1 {
		t.Fatalf("RenewSessions(idle %v) = %d, want 1: the Ack just now is activity of session \"active\"; session \"idle\" saw none for longer than idle",
			lt, n)
	}
}

func testSessionRenewOfMessageLockCountsAsActivity(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, smsg("active", "1"), smsg("idle", "2"))
	b := mustFetch(t, q, as(ownerA), "session active")
	ack(t, q, mustFetch(t, q, as(ownerA), "session idle"))
	clk.past(clk.Now().Add(lt))
	if _, err := q.Renew(t.Context(), b.Token, long); err != nil {
		t.Fatalf("Renew of a live lock failed: %v", err)
	}
	if n := renewSessions(t, q, []string{ownerA}, long, lt); n != 1 {
		t.Fatalf("RenewSessions(idle %v) = %d, want 1: the Renew just now is activity of session \"active\"; session \"idle\" saw none for longer than idle",
			lt, n)
	}
}

func testSessionCleanupForgetsLapsedIdleSessions(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, smsg("s1", "1"))
	lease := clk.Now().Add(lt)
	ack(t, q, mustFetch(t, q, withSession(ownerA, lt), "s1"))
	clk.justBefore(lease)
	if n := cleanupSessions(t, q); n != 0 {
		t.Fatalf("CleanupSessions = %d while the lease is live, want 0", n)
	}
	clk.past(lease)
	if n := cleanupSessions(t, q); n != 1 {
		t.Fatalf("CleanupSessions = %d, want 1: session s1's lease lapsed and it has no pending message", n)
	}
	if n := cleanupSessions(t, q); n != 0 {
		t.Fatalf("a second CleanupSessions = %d, want 0: s1 was already forgotten", n)
	}
	put(t, q, smsg("s1", "2"))
	wantSession(t, mustFetch(t, q, as(ownerB), "s1"), "s1", "2", "a forgotten session can be claimed again")
	if n := cleanupSessions(t, q); n != 0 {
		t.Fatalf("CleanupSessions = %d, want 0: owner-b holds s1 with a live lease", n)
	}
	mustFetchNothing(t, q, as(ownerA), "owner-b re-claimed s1")
}

func testSessionCleanupKeepsSessionsWithPendingMessages(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, smsg("locked", "l-1"), smsg("queued", "q-1"), smsg("queued", "q-2"))
	opts := withSession(ownerA, lt)
	opts.LockTimeout = long
	lease := clk.Now().Add(lt)
	held := mustFetch(t, q, opts, "session locked")
	wantSession(t, held, "locked", "l-1", "owner-a claims session \"locked\" and keeps its message locked")
	b := mustFetch(t, q, opts, "session queued")
	wantSession(t, b, "queued", "q-1", "owner-a claims session \"queued\"")
	ack(t, q, b)
	clk.past(lease)
	if n := cleanupSessions(t, q); n != 0 {
		t.Fatalf("CleanupSessions = %d, want 0: both lapsed sessions still have a pending message (one locked, one queued)", n)
	}
	wantSession(t, mustFetch(t, q, as(ownerB), "session queued"), "queued", "q-2", "the lapsed session \"queued\" is claimable by another owner")
	if err := q.Ack(t.Context(), held.Token); err != nil {
		t.Fatalf("Ack of a live message lock failed after its session's lease lapsed: %v", err)
	}
	wantStats(t, q, qn, mq.Stats{Locked: 1}, "l-1 and q-1 were acked; q-2 is locked by owner-b")
}

func testSessionCleanupKeepsLiveSessions(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, smsg("s1", "1"))
	ack(t, q, mustFetch(t, q, as(ownerA), "s1"))
	if n := cleanupSessions(t, q); n != 0 {
		t.Fatalf("CleanupSessions = %d, want 0: owner-a's lease on s1 is live", n)
	}
	put(t, q, smsg("s1", "2"))
	mustFetchNothing(t, q, as(ownerB), "cleanup must not forget a live session: owner-b must not receive its message")
	wantSession(t, mustFetch(t, q, as(ownerA), "s1"), "s1", "2", "owner-a still holds s1")
}

func testSessionAbandonedMessageIsRetriedByOwner(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, smsg("s1", "1"))
	b := mustFetch(t, q, as(ownerA), "s1")
	wantAttempts(t, b, "first fetch", 1)
	abandon(t, q, b, mq.AbandonOptions{})
	mustFetchNothing(t, q, as(ownerB), "Abandon releases the message, not the session: owner-b must not receive it")
	r := mustFetch(t, q, as(ownerA), "s1")
	if r.Messages[0].ID != b.Messages[0].ID {
		t.Fatalf("the owner refetched id %d, want the abandoned id %d", r.Messages[0].ID, b.Messages[0].ID)
	}
	wantAttempts(t, r, "second fetch", 2)
	abandon(t, q, r, mq.AbandonOptions{IgnoreAttempt: true})
	r = mustFetch(t, q, as(ownerA), "s1")
	wantAttempts(t, r, "Abandon with IgnoreAttempt undoes the abandoned fetch", 2)
	ack(t, q, r)
	wantEmpty(t, q, qn, "the session message was acked")
}

func testSessionMessageLockLapseRedeliversToOwner(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, smsg("s1", "1"))
	opts := as(ownerA)
	opts.LockTimeout = lt
	b := mustFetch(t, q, opts, "s1")
	clk.justBefore(b.LockedUntil)
	mustFetchNothing(t, q, as(ownerA), "the message lock holds until its LockedUntil, also for the session's owner")
	clk.past(b.LockedUntil)
	mustFetchNothing(t, q, as(ownerB), "the message lock lapsed but owner-a's lease is live: owner-b must not receive the message")
	r := mustFetch(t, q, as(ownerA), "s1")
	wantSession(t, r, "s1", "1", "the owner gets the message whose lock lapsed")
	wantAttempts(t, r, "second fetch", 2)
}

func testSessionAckSucceedsAfterLeaseLapses(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, smsg("s1", "1"))
	opts := withSession(ownerA, lt)
	opts.LockTimeout = long
	lease := clk.Now().Add(lt)
	b := mustFetch(t, q, opts, "s1")
	clk.past(lease)
	if err := q.Ack(t.Context(), b.Token); err != nil {
		t.Fatalf("Ack with a live message lock failed after the session lease lapsed: %v; message locks and session leases are independent", err)
	}
	wantEmpty(t, q, qn, "the message was acked")
}

func testSessionNewOwnerTakesOverAfterLeaseLapses(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, smsg("s1", "1"))
	opts := withSession(ownerA, lt)
	opts.LockTimeout = long
	lease := clk.Now().Add(lt)
	b := mustFetch(t, q, opts, "s1")
	clk.past(lease)
	put(t, q, smsg("s1", "2"))
	wantSession(t, mustFetch(t, q, as(ownerB), "s1"), "s1", "2", "after owner-a's lease lapsed, owner-b claims s1 with its new message")
	abandon(t, q, b, mq.AbandonOptions{})
	mustFetchNothing(t, q, as(ownerA), "owner-b now holds s1: owner-a must not get the message it abandoned")
	r := mustFetch(t, q, as(ownerB), "s1")
	wantSession(t, r, "s1", "1", "the new owner gets the abandoned message")
	wantAttempts(t, r, "second fetch", 2)
}

func testSessionBothLocksLapseAnotherOwnerGetsRedelivery(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, smsg("s1", "1"))
	opts := withSession(ownerA, lt)
	opts.LockTimeout = lt
	b := mustFetch(t, q, opts, "s1")
	clk.justBefore(b.LockedUntil)
	mustFetchNothing(t, q, as(ownerB), "owner-b must not receive a message of owner-a's session")
	clk.past(b.LockedUntil)
	r := mustFetch(t, q, as(ownerB), "s1")
	wantSession(t, r, "s1", "1", "after the lock and the lease lapsed, another owner gets the message")
	wantAttempts(t, r, "second fetch", 2)
}
