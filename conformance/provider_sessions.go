// Port of duroxide's provider validation module sessions
// (src/provider_validation/sessions.rs, snapshot 0.1.26, commit 58cdc0e): implicit
// session routing of activities (affinity to the owning worker, claiming, lease
// expiry and renewal, idle detection, cleanup of orphaned sessions).
package conformance

import (
	"slices"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "Sessions", cases: []providerCase{
		{"NonSessionItemsFetchableByAnyWorker", "test_non_session_items_fetchable_by_any_worker", sessNonSessionItemsFetchableByAnyWorker},
		{"SessionItemClaimableWhenNoSession", "test_session_item_claimable_when_no_session", sessSessionItemClaimableWhenNoSession},
		{"SessionAffinitySameWorker", "test_session_affinity_same_worker", sessSessionAffinitySameWorker},
		{"SessionAffinityBlocksOtherWorker", "test_session_affinity_blocks_other_worker", sessSessionAffinityBlocksOtherWorker},
		{"DifferentSessionsDifferentWorkers", "test_different_sessions_different_workers", sessDifferentSessionsDifferentWorkers},
		{"MixedSessionAndNonSessionItems", "test_mixed_session_and_non_session_items", sessMixedSessionAndNonSessionItems},
		{"SessionClaimableAfterLockExpiry", "test_session_claimable_after_lock_expiry", sessSessionClaimableAfterLockExpiry},
		{"NoneSessionSkipsSessionItems", "test_none_session_skips_session_items", sessNoneSessionSkipsSessionItems},
		{"SomeSessionReturnsAllItems", "test_some_session_returns_all_items", sessSomeSessionReturnsAllItems},
		{"RenewSessionLockActive", "test_renew_session_lock_active", sessRenewSessionLockActive},
		{"RenewSessionLockSkipsIdle", "test_renew_session_lock_skips_idle", sessRenewSessionLockSkipsIdle},
		{"RenewSessionLockNoSessions", "test_renew_session_lock_no_sessions", sessRenewSessionLockNoSessions},
		{"CleanupRemovesExpiredNoItems", "test_cleanup_removes_expired_no_items", sessCleanupRemovesExpiredNoItems},
		{"CleanupKeepsSessionsWithPendingItems", "test_cleanup_keeps_sessions_with_pending_items", sessCleanupKeepsSessionsWithPendingItems},
		{"CleanupKeepsActiveSessions", "test_cleanup_keeps_active_sessions", sessCleanupKeepsActiveSessions},
		{"AckUpdatesSessionLastActivity", "test_ack_updates_session_last_activity", sessAckUpdatesSessionLastActivity},
		{"RenewWorkItemUpdatesSessionLastActivity", "test_renew_work_item_updates_session_last_activity", sessRenewWorkItemUpdatesSessionLastActivity},
		{"SessionItemsProcessedInOrder", "test_session_items_processed_in_order", sessSessionItemsProcessedInOrder},
		{"NonSessionItemsReturnedWithSessionConfig", "test_non_session_items_returned_with_session_config", sessNonSessionItemsReturnedWithSessionConfig},
		{"SharedWorkerIDAnyCallerCanFetchOwnedSession", "test_shared_worker_id_any_caller_can_fetch_owned_session", sessSharedWorkerIDAnyCallerCanFetchOwnedSession},
		{"ConcurrentSessionClaimOnlyOneWins", "test_concurrent_session_claim_only_one_wins", sessConcurrentSessionClaimOnlyOneWins},
		{"SessionTakeoverAfterLockExpiry", "test_session_takeover_after_lock_expiry", sessSessionTakeoverAfterLockExpiry},
		{"CleanupThenNewItemRecreatesSession", "test_cleanup_then_new_item_recreates_session", sessCleanupThenNewItemRecreatesSession},
		{"AbandonedSessionItemRetryable", "test_abandoned_session_item_retryable", sessAbandonedSessionItemRetryable},
		{"AbandonedSessionItemIgnoreAttempt", "test_abandoned_session_item_ignore_attempt", sessAbandonedSessionItemIgnoreAttempt},
		{"RenewSessionLockAfterExpiryReturnsZero", "test_renew_session_lock_after_expiry_returns_zero", sessRenewSessionLockAfterExpiryReturnsZero},
		{"OriginalWorkerReclaimsExpiredSession", "test_original_worker_reclaims_expired_session", sessOriginalWorkerReclaimsExpiredSession},
		{"ActivityLockExpiresSessionLockValidSameWorkerRefetches", "test_activity_lock_expires_session_lock_valid_same_worker_refetches", sessActivityLockExpiresSessionLockValidSameWorkerRefetches},
		{"SessionLockExpiresNewOwnerGetsRedelivery", "test_session_lock_expires_new_owner_gets_redelivery", sessSessionLockExpiresNewOwnerGetsRedelivery},
		{"SessionLockExpiresSameWorkerReacquires", "test_session_lock_expires_same_worker_reacquires", sessSessionLockExpiresSameWorkerReacquires},
		{"BothLocksExpireDifferentWorkerClaims", "test_both_locks_expire_different_worker_claims", sessBothLocksExpireDifferentWorkerClaims},
		{"SessionLockExpiresActivityLockValidAckSucceeds", "test_session_lock_expires_activity_lock_valid_ack_succeeds", sessSessionLockExpiresActivityLockValidAckSucceeds},
		{"SessionLockRenewalExtendsPastOriginalTimeout", "test_session_lock_renewal_extends_past_original_timeout", sessSessionLockRenewalExtendsPastOriginalTimeout},
	}})
}

// ---- helpers of this module ----

// sessWorkLock is the work-item lock of fetches that do not test lock expiry.
const sessWorkLock = 5 * time.Second

// sessActivity is ActivityExecute id of instance (execution 1) bound to session.
func sessActivity(instance string, id uint64, session string) provider.WorkItem {
	it := activityExecute(instance, 1, id, "SessionActivity", "{}")
	it.SessionID = session
	return it
}

// sessPlain is ActivityExecute id of instance (execution 1) without a session.
func sessPlain(instance string, id uint64) provider.WorkItem {
	return activityExecute(instance, 1, id, "PlainActivity", "{}")
}

// sessCfg is owner's session config with the standard 30s session lock.
func sessCfg(owner string) *provider.SessionFetchConfig {
	return sessCfgLock(owner, 30*time.Second)
}

// sessCfgLock is owner's session config with session lock lock.
func sessCfgLock(owner string, lock time.Duration) *provider.SessionFetchConfig {
	return &provider.SessionFetchConfig{OwnerID: owner, LockTimeout: lock}
}

func sessOwner(cfg *provider.SessionFetchConfig) string {
	if cfg == nil {
		return "no session"
	}
	return "owner " + cfg.OwnerID
}

// sessFetch fetches a worker item with work lock lock, session config cfg (nil = no
// session) and the default tag filter; nil when none.
func sessFetch(t *testing.T, p provider.Provider, lock time.Duration, cfg *provider.SessionFetchConfig) *provider.WorkItemLease {
	t.Helper()
	lease, err := p.FetchWorkItem(t.Context(), provider.WorkFetchOptions{LockTimeout: lock, Session: cfg})
	if err != nil {
		t.Fatalf("FetchWorkItem(%s): %v", sessOwner(cfg), err)
	}
	if lease != nil && lease.Item.Kind != provider.WorkActivityExecute {
		t.Fatalf("FetchWorkItem(%s) returned a %s item; want ActivityExecute", sessOwner(cfg), lease.Item.Kind)
	}
	return lease
}

// sessMustFetch is sessFetch that requires an item.
func sessMustFetch(t *testing.T, p provider.Provider, lock time.Duration, cfg *provider.SessionFetchConfig, what string) *provider.WorkItemLease {
	t.Helper()
	lease := sessFetch(t, p, lock, cfg)
	if lease == nil {
		t.Fatalf("FetchWorkItem(%s) returned nothing; want %s", sessOwner(cfg), what)
	}
	return lease
}

// sessNothing requires that a fetch returns nothing.
func sessNothing(t *testing.T, p provider.Provider, cfg *provider.SessionFetchConfig, why string) {
	t.Helper()
	if lease := sessFetch(t, p, sessWorkLock, cfg); lease != nil {
		t.Fatalf("FetchWorkItem(%s) returned activity %d (session %q); want nothing: %s",
			sessOwner(cfg), lease.Item.ID, lease.Item.SessionID, why)
	}
}

func sessAck(t *testing.T, p provider.Provider, token string, completion *provider.WorkItem) {
	t.Helper()
	if err := p.AckWorkItem(t.Context(), token, completion); err != nil {
		t.Fatalf("AckWorkItem: %v", err)
	}
}

// sessClaim fetches (claiming the session of the only visible item) and acks it.
func sessClaim(t *testing.T, p provider.Provider, cfg *provider.SessionFetchConfig, what string) {
	t.Helper()
	sessAck(t, p, sessMustFetch(t, p, sessWorkLock, cfg, what).LockToken, nil)
}

func sessRenew(t *testing.T, p provider.Provider, owners []string, extend, idle time.Duration) int {
	t.Helper()
	n, err := p.RenewSessionLock(t.Context(), owners, extend, idle)
	if err != nil {
		t.Fatalf("RenewSessionLock(%v, %v, idle %v): %v", owners, extend, idle, err)
	}
	return n
}

func sessCleanup(t *testing.T, p provider.Provider, idle time.Duration) int {
	t.Helper()
	n, err := p.CleanupOrphanedSessions(t.Context(), idle)
	if err != nil {
		t.Fatalf("CleanupOrphanedSessions(%v): %v", idle, err)
	}
	return n
}

// sessExpect checks a fetched item's activity id and session.
func sessExpect(t *testing.T, l *provider.WorkItemLease, id uint64, session string) {
	t.Helper()
	if l.Item.ID != id || l.Item.SessionID != session {
		t.Fatalf("fetched activity %d of session %q; want activity %d of session %q", l.Item.ID, l.Item.SessionID, id, session)
	}
}

// sessExpectSession checks a fetched item's session.
func sessExpectSession(t *testing.T, l *provider.WorkItemLease, session string) {
	t.Helper()
	if l.Item.SessionID != session {
		t.Fatalf("fetched activity %d of session %q; want session %q", l.Item.ID, l.Item.SessionID, session)
	}
}

// ---- basic routing ----

func sessNonSessionItemsFetchableByAnyWorker(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessPlain("inst-1", 1))

	sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "the plain activity (fetchable by any worker)")
}

func sessSessionItemClaimableWhenNoSession(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))

	l := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "the activity of unclaimed session-1")
	sessExpectSession(t, l, "session-1")
}

func sessSessionAffinitySameWorker(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(t, p, sessCfg("worker-A"), "activity 1 of session-1")

	enqueueWork(t, p, sessActivity("inst-1", 2, "session-1"))
	sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "activity 2 of session-1, owned by worker-A")
}

func sessSessionAffinityBlocksOtherWorker(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(t, p, sessCfg("worker-A"), "activity 1 of session-1")

	enqueueWork(t, p, sessActivity("inst-1", 2, "session-1"))
	sessNothing(t, p, sessCfg("worker-B"), "session-1 is owned by worker-A")
}

func sessDifferentSessionsDifferentWorkers(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(t, p, sessCfg("worker-A"), "activity 1 of session-1")
	enqueueWork(t, p, sessActivity("inst-2", 1, "session-2"))
	sessClaim(t, p, sessCfg("worker-B"), "activity 1 of session-2")

	enqueueWork(t, p, sessActivity("inst-1", 2, "session-1"))
	enqueueWork(t, p, sessActivity("inst-2", 2, "session-2"))

	a := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "the session-1 activity")
	sessExpectSession(t, a, "session-1")
	b := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-B"), "the session-2 activity")
	sessExpectSession(t, b, "session-2")
}

func sessMixedSessionAndNonSessionItems(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(t, p, sessCfg("worker-A"), "activity 1 of session-1")

	enqueueWork(t, p, sessActivity("inst-1", 2, "session-1"))
	enqueueWork(t, p, sessPlain("inst-2", 1))

	l := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-B"), "the plain activity")
	sessExpectSession(t, l, "")
}

// ---- session locks and expiry ----

func sessSessionClaimableAfterLockExpiry(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(t, p, sessCfgLock("worker-A", 50*time.Millisecond), "activity 1 of session-1")

	time.Sleep(100 * time.Millisecond)
	enqueueWork(t, p, sessActivity("inst-1", 2, "session-1"))

	sessMustFetch(t, p, sessWorkLock, sessCfg("worker-B"), "activity 2 of session-1, whose lease lapsed")
}

func sessNoneSessionSkipsSessionItems(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))
	enqueueWork(t, p, sessPlain("inst-2", 2))

	l := sessMustFetch(t, p, sessWorkLock, nil, "the plain activity 2")
	sessExpect(t, l, 2, "")
	sessAck(t, p, l.LockToken, nil)

	sessNothing(t, p, nil, "a fetch without a session config must not see session activities")

	l = sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "the session-1 activity")
	sessExpectSession(t, l, "session-1")
}

func sessSomeSessionReturnsAllItems(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "sess-A"))
	enqueueWork(t, p, sessActivity("inst-2", 2, "sess-B"))
	enqueueWork(t, p, sessActivity("inst-3", 3, "sess-C"))
	enqueueWork(t, p, sessPlain("inst-4", 4))

	// The provider imposes no per-owner session limit: one owner gets all four.
	var ids []uint64
	for range 4 {
		l := sessMustFetch(t, p, sessWorkLock, sessCfg("shared-proc"), "another activity")
		ids = append(ids, l.Item.ID)
		sessAck(t, p, l.LockToken, nil)
	}
	if want := []uint64{1, 2, 3, 4}; !slices.Equal(ids, want) {
		t.Fatalf("fetched activities %v; want %v (FIFO)", ids, want)
	}
	sessNothing(t, p, sessCfg("shared-proc"), "the queue is empty")
}

// ---- renewal ----

func sessRenewSessionLockActive(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(t, p, sessCfgLock("worker-A", 5*time.Second), "activity 1 of session-1")

	if n := sessRenew(t, p, []string{"worker-A"}, 30*time.Second, 300*time.Second); n != 1 {
		t.Fatalf("RenewSessionLock renewed %d sessions; want 1", n)
	}

	enqueueWork(t, p, sessActivity("inst-2", 1, "session-2"))
	sessClaim(t, p, sessCfg("worker-A"), "activity 1 of session-2")

	if n := sessRenew(t, p, []string{"worker-A"}, 30*time.Second, 300*time.Second); n != 2 {
		t.Fatalf("RenewSessionLock renewed %d sessions; want 2", n)
	}
}

func sessRenewSessionLockSkipsIdle(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(t, p, sessCfg("worker-A"), "activity 1 of session-1")

	// With a zero idle timeout every session is idle.
	if n := sessRenew(t, p, []string{"worker-A"}, 30*time.Second, 0); n != 0 {
		t.Fatalf("RenewSessionLock with idle timeout 0 renewed %d sessions; want 0 (idle)", n)
	}
}

func sessRenewSessionLockNoSessions(t *testing.T, e penv) {
	p := e.open(t)
	if n := sessRenew(t, p, []string{"worker-A"}, 30*time.Second, 300*time.Second); n != 0 {
		t.Fatalf("RenewSessionLock for an owner without sessions renewed %d; want 0", n)
	}
}

// ---- cleanup ----

func sessCleanupRemovesExpiredNoItems(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(t, p, sessCfgLock("worker-A", 50*time.Millisecond), "activity 1 of session-1")

	time.Sleep(100 * time.Millisecond)

	if n := sessCleanup(t, p, 300*time.Second); n != 1 {
		t.Fatalf("CleanupOrphanedSessions removed %d sessions; want 1 (lapsed, no pending items)", n)
	}
}

func sessCleanupKeepsSessionsWithPendingItems(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(t, p, sessCfgLock("worker-A", 50*time.Millisecond), "activity 1 of session-1")
	enqueueWork(t, p, sessActivity("inst-1", 2, "session-1"))

	time.Sleep(100 * time.Millisecond)

	if n := sessCleanup(t, p, 300*time.Second); n != 0 {
		t.Fatalf("CleanupOrphanedSessions removed %d sessions; want 0 (session-1 has a pending item)", n)
	}
}

func sessCleanupKeepsActiveSessions(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(t, p, sessCfgLock("worker-A", 300*time.Second), "activity 1 of session-1")

	if n := sessCleanup(t, p, 300*time.Second); n != 0 {
		t.Fatalf("CleanupOrphanedSessions removed %d sessions; want 0 (the lease is live)", n)
	}
}

// ---- activity on a session bumps its last activity ----

func sessAckUpdatesSessionLastActivity(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const idle = 200 * time.Millisecond
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))
	l := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "activity 1 of session-1")

	// Let the fetch's activity time go stale; only the ack can make it fresh again.
	time.Sleep(idle + 50*time.Millisecond)
	completion := activityCompleted("inst-1", 1, 1, "ok")
	sessAck(t, p, l.LockToken, &completion)

	if n := sessRenew(t, p, []string{"worker-A"}, 30*time.Second, idle); n != 1 {
		t.Fatalf("RenewSessionLock(idle %v) right after the ack renewed %d sessions; want 1 (AckWorkItem must update the session's last activity)", idle, n)
	}
}

func sessRenewWorkItemUpdatesSessionLastActivity(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const idle = 200 * time.Millisecond
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))
	l := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "activity 1 of session-1")

	time.Sleep(idle + 50*time.Millisecond)
	if err := p.RenewWorkItemLock(t.Context(), l.LockToken, 30*time.Second); err != nil {
		t.Fatalf("RenewWorkItemLock: %v", err)
	}

	if n := sessRenew(t, p, []string{"worker-A"}, 30*time.Second, idle); n != 1 {
		t.Fatalf("RenewSessionLock(idle %v) right after the work-item renewal renewed %d sessions; want 1 (RenewWorkItemLock must update the session's last activity)", idle, n)
	}
}

// ---- edge cases ----

func sessSessionItemsProcessedInOrder(t *testing.T, e penv) {
	p := e.open(t)
	for id := uint64(1); id <= 3; id++ {
		enqueueWork(t, p, sessActivity("inst-1", id, "session-1"))
	}
	for want := uint64(1); want <= 3; want++ {
		l := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "the next session-1 activity")
		if l.Item.ID != want {
			t.Fatalf("fetched activity %d; want %d (FIFO)", l.Item.ID, want)
		}
		sessAck(t, p, l.LockToken, nil)
	}
}

func sessNonSessionItemsReturnedWithSessionConfig(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(t, p, sessCfg("worker-A"), "activity 1 of session-1")

	enqueueWork(t, p, sessPlain("inst-2", 1))
	l := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "the plain activity")
	sessExpectSession(t, l, "")
}

// ---- process-level identity ----

func sessSharedWorkerIDAnyCallerCanFetchOwnedSession(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "shared-sess"))
	enqueueWork(t, p, sessActivity("inst-1", 2, "shared-sess"))

	// Two slots of one process share the owner id.
	l := sessMustFetch(t, p, sessWorkLock, sessCfg("process-1"), "activity 1")
	sessExpect(t, l, 1, "shared-sess")
	sessAck(t, p, l.LockToken, nil)
	l = sessMustFetch(t, p, sessWorkLock, sessCfg("process-1"), "activity 2 for the same owner id")
	sessExpect(t, l, 2, "shared-sess")
	sessAck(t, p, l.LockToken, nil)

	enqueueWork(t, p, sessActivity("inst-1", 3, "shared-sess"))
	sessNothing(t, p, sessCfg("process-2"), "shared-sess is owned by process-1")
}

// ---- races ----

func sessConcurrentSessionClaimOnlyOneWins(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "contested-sess"))
	enqueueWork(t, p, sessActivity("inst-1", 2, "contested-sess"))

	a := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "activity 1 (claiming contested-sess)")
	// worker-A holds the session (not acked yet).
	sessNothing(t, p, sessCfg("worker-B"), "worker-A holds contested-sess")
	sessAck(t, p, a.LockToken, nil)
}

func sessSessionTakeoverAfterLockExpiry(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "takeover-sess"))
	sessClaim(t, p, sessCfgLock("worker-A", 50*time.Millisecond), "activity 1 of takeover-sess")
	enqueueWork(t, p, sessActivity("inst-1", 2, "takeover-sess"))

	time.Sleep(100 * time.Millisecond)

	l := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-B"), "activity 2 of takeover-sess, whose lease lapsed")
	sessExpectSession(t, l, "takeover-sess")
}

func sessCleanupThenNewItemRecreatesSession(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "ephemeral-sess"))
	sessClaim(t, p, sessCfgLock("worker-A", 50*time.Millisecond), "activity 1 of ephemeral-sess")

	time.Sleep(100 * time.Millisecond)
	if n := sessCleanup(t, p, 300*time.Second); n != 1 {
		t.Fatalf("CleanupOrphanedSessions removed %d sessions; want 1", n)
	}

	enqueueWork(t, p, sessActivity("inst-1", 2, "ephemeral-sess"))
	l := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-B"), "activity 2 of the cleaned-up ephemeral-sess")
	sessExpect(t, l, 2, "ephemeral-sess")
}

func sessAbandonedSessionItemRetryable(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "retry-sess"))

	l := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "activity 1")
	if l.AttemptCount != 1 || l.Item.ID != 1 {
		t.Fatalf("first fetch: activity %d attempt %d; want activity 1 attempt 1", l.Item.ID, l.AttemptCount)
	}
	if err := p.AbandonWorkItem(t.Context(), l.LockToken, 0, false); err != nil {
		t.Fatalf("AbandonWorkItem: %v", err)
	}

	l = sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "the abandoned activity 1 again")
	if l.AttemptCount != 2 || l.Item.ID != 1 {
		t.Fatalf("refetch: activity %d attempt %d; want activity 1 attempt 2", l.Item.ID, l.AttemptCount)
	}
	sessAck(t, p, l.LockToken, nil)

	sessNothing(t, p, sessCfg("worker-A"), "the only activity was acked")
}

func sessAbandonedSessionItemIgnoreAttempt(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "ignore-sess"))

	l := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "activity 1")
	if l.AttemptCount != 1 {
		t.Fatalf("first fetch: attempt %d; want 1", l.AttemptCount)
	}
	if err := p.AbandonWorkItem(t.Context(), l.LockToken, time.Millisecond, true); err != nil {
		t.Fatalf("AbandonWorkItem(1ms, ignoreAttempt): %v", err)
	}

	time.Sleep(10 * time.Millisecond)
	l = sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "the abandoned activity 1 again")
	if l.AttemptCount != 1 {
		t.Fatalf("refetch after abandon with ignoreAttempt: attempt %d; want 1", l.AttemptCount)
	}
	sessAck(t, p, l.LockToken, nil)
}

func sessRenewSessionLockAfterExpiryReturnsZero(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "expired-sess"))
	sessClaim(t, p, sessCfgLock("worker-A", 50*time.Millisecond), "activity 1 of expired-sess")

	time.Sleep(100 * time.Millisecond)

	if n := sessRenew(t, p, []string{"worker-A"}, 30*time.Second, 300*time.Second); n != 0 {
		t.Fatalf("RenewSessionLock after the lease lapsed renewed %d sessions; want 0 (a lapsed lease is not resurrected)", n)
	}
}

func sessOriginalWorkerReclaimsExpiredSession(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "reclaim-sess"))
	sessClaim(t, p, sessCfgLock("worker-A", 50*time.Millisecond), "activity 1 of reclaim-sess")
	enqueueWork(t, p, sessActivity("inst-1", 2, "reclaim-sess"))

	time.Sleep(100 * time.Millisecond)

	l := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "activity 2 (re-claiming the lapsed session)")
	sessExpect(t, l, 2, "reclaim-sess")
}

func sessActivityLockExpiresSessionLockValidSameWorkerRefetches(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "sticky-sess"))

	// Short work lock, long (30s) session lock; the item is not acked.
	const shortWork = 500 * time.Millisecond
	sessMustFetch(t, p, shortWork, sessCfg("worker-A"), "activity 1")
	time.Sleep(shortWork + 100*time.Millisecond)

	sessNothing(t, p, sessCfg("worker-B"), "sticky-sess is still owned by worker-A")

	l := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "the redelivered activity 1 (session affinity)")
	if l.Item.ID != 1 || l.AttemptCount != 2 {
		t.Fatalf("refetch: activity %d attempt %d; want activity 1 attempt 2", l.Item.ID, l.AttemptCount)
	}
	sessAck(t, p, l.LockToken, nil)
}

func sessSessionLockExpiresNewOwnerGetsRedelivery(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "takeover2-sess"))

	// worker-A: short session lease, long work lock.
	const shortSession = 200 * time.Millisecond
	a := sessMustFetch(t, p, 5*time.Second, sessCfgLock("worker-A", shortSession), "activity 1")
	time.Sleep(shortSession + 100*time.Millisecond)

	enqueueWork(t, p, sessActivity("inst-1", 2, "takeover2-sess"))
	cfgB := sessCfg("worker-B")
	b := sessMustFetch(t, p, sessWorkLock, cfgB, "activity 2 (claiming the lapsed session)")
	sessExpect(t, b, 2, "takeover2-sess")
	sessAck(t, p, b.LockToken, nil)

	// worker-A gives up activity 1 (as if it timed out); it must go to the new owner.
	_ = p.AbandonWorkItem(t.Context(), a.LockToken, 0, false)

	l := sessMustFetch(t, p, sessWorkLock, cfgB, "the redelivered activity 1 for the new owner")
	if l.Item.ID != 1 || l.AttemptCount != 2 {
		t.Fatalf("redelivery: activity %d attempt %d; want activity 1 attempt 2", l.Item.ID, l.AttemptCount)
	}
	sessAck(t, p, l.LockToken, nil)
}

func sessSessionLockExpiresSameWorkerReacquires(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "reacq-sess"))
	const shortSession = 200 * time.Millisecond
	cfgA := sessCfgLock("worker-A", shortSession)
	sessClaim(t, p, cfgA, "activity 1")

	time.Sleep(shortSession + 100*time.Millisecond)
	enqueueWork(t, p, sessActivity("inst-1", 2, "reacq-sess"))

	l := sessMustFetch(t, p, sessWorkLock, cfgA, "activity 2 (re-acquiring the lapsed session)")
	sessExpect(t, l, 2, "reacq-sess")
	sessAck(t, p, l.LockToken, nil)
}

func sessBothLocksExpireDifferentWorkerClaims(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "both-expire-sess"))
	const short = 200 * time.Millisecond
	sessMustFetch(t, p, short, sessCfgLock("worker-A", short), "activity 1")

	time.Sleep(short + 200*time.Millisecond)

	l := sessMustFetch(t, p, sessWorkLock, sessCfg("worker-B"), "activity 1 after both locks lapsed")
	sessExpect(t, l, 1, "both-expire-sess")
	if l.AttemptCount != 2 {
		t.Fatalf("redelivery attempt %d; want 2", l.AttemptCount)
	}
	sessAck(t, p, l.LockToken, nil)
}

func sessSessionLockExpiresActivityLockValidAckSucceeds(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, sessActivity("inst-1", 1, "sess-expires"))
	const shortSession = 200 * time.Millisecond
	l := sessMustFetch(t, p, 30*time.Second, sessCfgLock("worker-A", shortSession), "activity 1")

	time.Sleep(shortSession + 100*time.Millisecond)

	// The session lease is a routing concern; the activity's own lock still holds.
	completion := activityCompleted("inst-1", 1, 1, "done")
	if err := p.AckWorkItem(t.Context(), l.LockToken, &completion); err != nil {
		t.Fatalf("AckWorkItem after the session lease lapsed (work lock still live): %v; want success", err)
	}
}

func sessSessionLockRenewalExtendsPastOriginalTimeout(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const lease = time.Second
	enqueueWork(t, p, sessActivity("inst-1", 1, "renew-ext-sess"))
	sessClaim(t, p, sessCfgLock("worker-A", lease), "activity 1")

	// At ~0.6s renew for another second (to ~1.6s).
	time.Sleep(600 * time.Millisecond)
	if n := sessRenew(t, p, []string{"worker-A"}, lease, 300*time.Second); n != 1 {
		t.Fatalf("RenewSessionLock renewed %d sessions; want 1", n)
	}

	// At ~1.0s, past the original expiry, worker-A still owns the session.
	time.Sleep(400 * time.Millisecond)
	enqueueWork(t, p, sessActivity("inst-1", 2, "renew-ext-sess"))

	sessNothing(t, p, sessCfg("worker-B"), "the renewed lease of worker-A outlives the original timeout")
	sessMustFetch(t, p, sessWorkLock, sessCfg("worker-A"), "activity 2 of the renewed session")
}
