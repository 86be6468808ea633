// Port of duroxide's provider validation module instance_locking
// (src/provider_validation/instance_locking.rs, snapshot 0.1.26, commit 58cdc0e).

package conformance

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "InstanceLocking", cases: []providerCase{
		{"ExclusiveInstanceLock", "test_exclusive_instance_lock", testInstanceLockingExclusiveInstanceLock},
		{"LockTokenUniqueness", "test_lock_token_uniqueness", testInstanceLockingLockTokenUniqueness},
		{"InvalidLockTokenRejection", "test_invalid_lock_token_rejection", testInstanceLockingInvalidLockTokenRejection},
		{"ConcurrentInstanceFetching", "test_concurrent_instance_fetching", testInstanceLockingConcurrentInstanceFetching},
		{"CompletionsArrivingDuringLockBlocked", "test_completions_arriving_during_lock_blocked", testInstanceLockingCompletionsArrivingDuringLockBlocked},
		{"CrossInstanceLockIsolation", "test_cross_instance_lock_isolation", testInstanceLockingCrossInstanceLockIsolation},
		{"MessageTaggingDuringLock", "test_message_tagging_during_lock", testInstanceLockingMessageTaggingDuringLock},
		{"AckOnlyAffectsLockedMessages", "test_ack_only_affects_locked_messages", testInstanceLockingAckOnlyAffectsLockedMessages},
		{"MultiThreadedLockContention", "test_multi_threaded_lock_contention", testInstanceLockingMultiThreadedLockContention},
		{"MultiThreadedNoDuplicateProcessing", "test_multi_threaded_no_duplicate_processing", testInstanceLockingMultiThreadedNoDuplicateProcessing},
		{"MultiThreadedLockExpirationRecovery", "test_multi_threaded_lock_expiration_recovery", testInstanceLockingMultiThreadedLockExpirationRecovery},
	}})
}

// ilFetchResult is what a concurrent fetcher saw.
type ilFetchResult struct {
	item *provider.OrchestrationItem
	err  error
}

// testInstanceLockingExclusiveInstanceLock: a locked instance cannot be fetched
// until its lock lapses; the refetch gets a new token.
func testInstanceLockingExclusiveInstanceLock(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "instance-A"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	first := mustFetchOrch(t, p, e.lt(), "the start of "+inst)
	atomNoOrch(t, p, e.lt(), "the instance is locked")

	time.Sleep(e.lapse())

	second := mustFetchOrch(t, p, e.lt(), inst+" after its lock lapsed")
	if second.LockToken == first.LockToken {
		t.Fatalf("the refetch after expiry reused lock token %q; want a new one", first.LockToken)
	}
}

// testInstanceLockingLockTokenUniqueness: every fetch issues a distinct token.
func testInstanceLockingLockTokenUniqueness(t *testing.T, e penv) {
	p := e.open(t)
	for i := range 5 {
		enqueueOrch(t, p, startItem(fmt.Sprintf("inst-%d", i), "TestOrch", "1.0.0", "{}"), 0)
	}
	tokens := map[string]bool{}
	for i := range 5 {
		item := mustFetchOrch(t, p, longLock, fmt.Sprintf("instance %d of 5", i+1))
		tokens[item.LockToken] = true
	}
	if len(tokens) != 5 {
		t.Fatalf("5 fetches issued %d distinct lock tokens; want 5", len(tokens))
	}
}

// testInstanceLockingInvalidLockTokenRejection: ack and abandon with an unknown token
// fail and leave the real lock in place.
func testInstanceLockingInvalidLockTokenRejection(t *testing.T, e penv) {
	p := e.open(t)
	enqueueOrch(t, p, startItem("instance-A", "TestOrch", "1.0.0", "{}"), 0)
	mustFetchOrch(t, p, longLock, "the start of instance-A")

	err := p.AckOrchestrationItem(t.Context(), "invalid-token", provider.OrchestrationAck{ExecutionID: 1})
	mustFailWith(t, err, provider.ErrLockLost, "ack with token \"invalid-token\"")

	err = p.AbandonOrchestrationItem(t.Context(), "invalid-token", 0, false)
	mustFailWith(t, err, provider.ErrLockLost, "abandon with token \"invalid-token\"")

	atomNoOrch(t, p, longLock, "the original lock must still be held")
}

// testInstanceLockingConcurrentInstanceFetching: concurrent fetchers each get a
// different instance.
func testInstanceLockingConcurrentInstanceFetching(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	for i := range 10 {
		enqueueOrch(t, p, startItem(fmt.Sprintf("inst-%d", i), "TestOrch", "1.0.0", "{}"), 0)
	}

	ctx := t.Context()
	results := make([]ilFetchResult, 10)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 30 * time.Millisecond) // stagger to reduce contention
			item, err := p.FetchOrchestrationItem(ctx, provider.FetchOptions{LockTimeout: longLock})
			results[i] = ilFetchResult{item, err}
		})
	}
	wg.Wait()

	instances := map[string]bool{}
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("fetcher %d: FetchOrchestrationItem: %v", i, r.err)
		}
		if r.item != nil {
			instances[r.item.Instance] = true
		}
	}
	if len(instances) != 10 {
		t.Fatalf("10 concurrent fetchers got %d distinct instances %v; want each of the 10 exactly once",
			len(instances), slices.Sorted(maps.Keys(instances)))
	}
}

// testInstanceLockingCompletionsArrivingDuringLockBlocked: messages arriving while
// the instance is locked cannot be fetched by others and are delivered, in order,
// with the unacked ones once the lock lapses.
func testInstanceLockingCompletionsArrivingDuringLockBlocked(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "instance-A"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, e.lt(), "the start of "+inst)
	if item.Instance != inst {
		t.Fatalf("fetched instance %q; want %q", item.Instance, inst)
	}

	for i := uint64(1); i <= 3; i++ {
		enqueueOrch(t, p, activityCompleted(inst, 1, i, fmt.Sprintf("result-%d", i)), 0)
	}
	atomNoOrch(t, p, e.lt(), "the instance is still locked")

	time.Sleep(e.lapse())

	again := mustFetchOrch(t, p, e.lt(), inst+" after its lock lapsed")
	if again.Instance != inst {
		t.Fatalf("refetched instance %q; want %q", again.Instance, inst)
	}
	if len(again.Messages) != 4 {
		t.Fatalf("refetch has %d messages %v; want 4 (the start and 3 completions)",
			len(again.Messages), atomMessageKinds(again.Messages))
	}
	if ids := atomCompletionIDs(again.Messages); !slices.Equal(ids, []uint64{1, 2, 3}) {
		t.Fatalf("refetch has ActivityCompleted ids %v; want [1 2 3]", ids)
	}
}

// testInstanceLockingCrossInstanceLockIsolation: locking one instance does not block
// another.
func testInstanceLockingCrossInstanceLockIsolation(t *testing.T, e penv) {
	p := e.open(t)
	const a, b = "instance-A", "instance-B"
	createInstance(t, p, a)
	createInstance(t, p, b)

	enqueueOrch(t, p, startItem(a, "TestOrch", "1.0.0", "{}"), 0)
	enqueueOrch(t, p, startItem(b, "TestOrch", "1.0.0", "{}"), 0)

	itemA := mustFetchOrch(t, p, longLock, "the oldest work ("+a+")")
	if itemA.Instance != a {
		t.Fatalf("first fetch got %q; want %q", itemA.Instance, a)
	}
	itemB := mustFetchOrch(t, p, longLock, b+" while "+a+" is locked")
	if itemB.Instance != b {
		t.Fatalf("second fetch got %q; want %q", itemB.Instance, b)
	}

	ackOrch(t, p, itemB.LockToken, provider.OrchestrationAck{ExecutionID: 1, Metadata: metadata("TestOrch", "1.0.0")})
	enqueueOrch(t, p, activityCompleted(b, 1, 1, "done"), 0)

	itemB2 := mustFetchOrch(t, p, longLock, b+" again while "+a+" is still locked")
	if itemB2.Instance != b {
		t.Fatalf("third fetch got %q; want %q", itemB2.Instance, b)
	}
	if itemA.Instance == itemB.Instance {
		t.Fatalf("both fetches returned %q", itemA.Instance)
	}
}

// testInstanceLockingMessageTaggingDuringLock: an ack deletes only the messages its
// fetch locked, not one that arrived meanwhile.
func testInstanceLockingMessageTaggingDuringLock(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"
	createInstance(t, p, inst)

	enqueueOrch(t, p, activityCompleted(inst, 1, 1, "msg1"), 0)
	enqueueOrch(t, p, activityCompleted(inst, 1, 2, "msg2"), 0)

	item := mustFetchOrch(t, p, longLock, "the two completions of "+inst)
	if item.Instance != inst || len(item.Messages) != 2 {
		t.Fatalf("fetched %q with %d messages %v; want %q with 2", item.Instance, len(item.Messages),
			atomMessageKinds(item.Messages), inst)
	}

	enqueueOrch(t, p, activityCompleted(inst, 1, 3, "msg3"), 0) // arrives during the lock
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: 1})

	next := mustFetchOrch(t, p, longLock, "the completion that arrived during the lock")
	if next.Instance != inst {
		t.Fatalf("fetched instance %q; want %q", next.Instance, inst)
	}
	if len(next.Messages) != 1 || next.Messages[0].Kind != provider.WorkActivityCompleted || next.Messages[0].ID != 3 {
		t.Fatalf("fetched messages %v (completion ids %v); want exactly ActivityCompleted id 3",
			atomMessageKinds(next.Messages), atomCompletionIDs(next.Messages))
	}
}

// testInstanceLockingAckOnlyAffectsLockedMessages: messages enqueued during a lock are
// neither fetchable then nor deleted by its ack.
func testInstanceLockingAckOnlyAffectsLockedMessages(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"
	createInstance(t, p, inst)

	enqueueOrch(t, p, activityCompleted(inst, 1, 1, "msg1"), 0)
	item := mustFetchOrch(t, p, longLock, "completion 1 of "+inst)
	if len(item.Messages) != 1 {
		t.Fatalf("fetched %d messages %v; want 1", len(item.Messages), atomMessageKinds(item.Messages))
	}

	enqueueOrch(t, p, activityCompleted(inst, 1, 2, "msg2"), 0)
	enqueueOrch(t, p, activityCompleted(inst, 1, 3, "msg3"), 0)
	atomNoOrch(t, p, longLock, "the instance is locked")

	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: 1})

	next := mustFetchOrch(t, p, longLock, "completions 2 and 3 of "+inst)
	if next.Instance != inst {
		t.Fatalf("fetched instance %q; want %q", next.Instance, inst)
	}
	if len(next.Messages) != 2 {
		t.Fatalf("fetched %d messages %v; want 2 (completions 2 and 3)", len(next.Messages), atomMessageKinds(next.Messages))
	}
	if ids := atomCompletionIDs(next.Messages); !slices.Equal(ids, []uint64{2, 3}) {
		t.Fatalf("fetched completion ids %v; want [2 3]", ids)
	}
}

// testInstanceLockingMultiThreadedLockContention: of many concurrent fetchers of one
// instance exactly one wins.
func testInstanceLockingMultiThreadedLockContention(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "contention-instance"
	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)

	ctx := t.Context()
	results := make([]ilFetchResult, 10)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			item, err := p.FetchOrchestrationItem(ctx, provider.FetchOptions{LockTimeout: longLock})
			results[i] = ilFetchResult{item, err}
		})
	}
	wg.Wait()

	var winners []int
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("fetcher %d: FetchOrchestrationItem: %v", i, r.err)
		}
		if r.item != nil {
			winners = append(winners, i)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("fetchers %v all locked %q; want exactly one", winners, inst)
	}
	if got := results[winners[0]].item.Instance; got != inst {
		t.Fatalf("the winner fetched %q; want %q", got, inst)
	}
	atomNoOrch(t, p, longLock, "the winner still holds the lock")
}

// testInstanceLockingMultiThreadedNoDuplicateProcessing: under heavy contention no
// instance is fetched twice, the fetchers get some, and none is lost: the rest are
// still there to fetch afterwards.
func testInstanceLockingMultiThreadedNoDuplicateProcessing(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const instances = 20
	for i := range instances {
		enqueueOrch(t, p, startItem(fmt.Sprintf("dup-test-%d", i), "TestOrch", "1.0.0", "{}"), 0)
	}

	ctx := t.Context()
	results := make([]ilFetchResult, 2*instances)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			time.Sleep(time.Duration((i*3)%50) * time.Millisecond)
			for attempt := 0; ; attempt++ {
				item, err := p.FetchOrchestrationItem(ctx, provider.FetchOptions{LockTimeout: longLock})
				if err != nil && provider.IsRetryable(err) && attempt < 2 {
					time.Sleep(time.Duration(10*(attempt+1)) * time.Millisecond)
					continue
				}
				results[i] = ilFetchResult{item, err}
				return
			}
		})
	}
	wg.Wait()

	seen := map[string]int{}
	total := 0
	for i, r := range results {
		switch {
		case r.err != nil && provider.IsRetryable(r.err):
			// duroxide tolerates a fetcher that keeps hitting retryable errors.
			t.Logf("fetcher %d gave up after 3 retryable errors: %v", i, r.err)
		case r.err != nil:
			t.Errorf("fetcher %d: FetchOrchestrationItem: %v", i, r.err)
		case r.item != nil:
			seen[r.item.Instance]++
			total++
		}
	}
	if total == 0 {
		t.Fatalf("none of %d concurrent fetchers got any of the %d instances", len(results), instances)
	}
	// A fetcher may find every instance locked by another in flight and come back
	// empty-handed; what none of them took must still be there, once.
	for {
		item, err := p.FetchOrchestrationItem(ctx, provider.FetchOptions{LockTimeout: longLock})
		if err != nil {
			t.Fatalf("FetchOrchestrationItem after the concurrent fetches: %v", err)
		}
		if item == nil {
			break
		}
		seen[item.Instance]++
	}
	for inst, n := range seen {
		if n > 1 {
			t.Errorf("instance %q was fetched %d times; want once", inst, n)
		}
	}
	if len(seen) != instances {
		t.Errorf("%d of %d instances were fetched (%d by the concurrent fetchers); want every one", len(seen), instances, total)
	}
}

// testInstanceLockingMultiThreadedLockExpirationRecovery: a lock held by a crashed
// fetcher blocks others until it lapses, then another fetcher takes over. The
// others count from the moment T1 holds the lock, not from a common start: a
// provider's first fetch may take longer than the margins (fresh connections plan
// their statements), and T2 must not fetch before T1 has, nor T3 before the lock
// can have lapsed.
func testInstanceLockingMultiThreadedLockExpirationRecovery(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "expiration-instance"
	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)

	ctx := t.Context()
	lock := e.lt()
	held := make(chan struct{}) // closed once T1's fetch returned
	var holder, blocked, recovered ilFetchResult
	var wg sync.WaitGroup

	wg.Go(func() { // T1: fetch and hold the lock without acking (a crashed worker)
		holder.item, holder.err = p.FetchOrchestrationItem(ctx, provider.FetchOptions{LockTimeout: lock})
		close(held)
		time.Sleep(lock + 200*time.Millisecond)
	})
	wg.Go(func() { // T2: fetch while the lock is held
		<-held
		blocked.item, blocked.err = p.FetchOrchestrationItem(ctx, provider.FetchOptions{LockTimeout: lock})
	})
	wg.Go(func() { // T3: fetch after the lock lapsed
		<-held
		time.Sleep(e.lapse())
		recovered.item, recovered.err = p.FetchOrchestrationItem(ctx, provider.FetchOptions{LockTimeout: lock})
	})
	wg.Wait()

	switch {
	case holder.err != nil:
		t.Fatalf("T1 fetch: %v", holder.err)
	case holder.item == nil:
		t.Fatal("T1 fetched nothing; want " + inst)
	case holder.item.Instance != inst:
		t.Fatalf("T1 fetched %q; want %q", holder.item.Instance, inst)
	}
	if blocked.err != nil {
		t.Fatalf("T2 fetch: %v", blocked.err)
	}
	if blocked.item != nil {
		t.Fatalf("T2 fetched %q while T1 held its lock; want nothing", blocked.item.Instance)
	}
	switch {
	case recovered.err != nil:
		t.Fatalf("T3 fetch: %v", recovered.err)
	case recovered.item == nil:
		t.Fatal("T3 fetched nothing after T1's lock lapsed; want " + inst)
	case recovered.item.Instance != inst:
		t.Fatalf("T3 fetched %q; want %q", recovered.item.Instance, inst)
	case recovered.item.LockToken == holder.item.LockToken:
		t.Fatalf("T3 got T1's lock token %q; want a new one", holder.item.LockToken)
	}
}
