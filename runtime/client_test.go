package runtime

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/duroq/duroq/internal/wake"
	"github.com/duroq/duroq/runtime/provider"
)

var (
	errHiccup = errors.New("disk hiccup")
	errBroken = errors.New("schema is broken")
)

// fakeProvider serves one instance's history, custom status and KV from memory,
// failing each operation retryably as many times as fails says, or permanently with
// perm. The embedded Provider is nil: the tests call nothing else.
type fakeProvider struct {
	provider.Provider
	mu       sync.Mutex
	fails    map[string]int // operation → retryable failures left
	perm     error
	calls    map[string]int
	history  []provider.Event
	status   *string
	version  uint64
	kv       map[string]string
	abandons []string // "token delay ignoreAttempt reason" of each abandon
}

func newFakeProvider(history ...provider.Event) *fakeProvider {
	return &fakeProvider{fails: map[string]int{}, calls: map[string]int{}, history: history, kv: map[string]string{}}
}

// call counts op and returns its injected failure, if any.
func (f *fakeProvider) call(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[op]++
	if f.perm != nil {
		return provider.Permanent(op, f.perm)
	}
	if f.fails[op] > 0 {
		f.fails[op]--
		return provider.Retryable(op, errHiccup)
	}
	return nil
}

func (f *fakeProvider) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *fakeProvider) Read(context.Context, string) ([]provider.Event, error) {
	if err := f.call("read"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.history, nil
}

func (f *fakeProvider) GetCustomStatus(_ context.Context, _ string, lastSeen uint64) (*string, uint64, bool, error) {
	if err := f.call("custom_status"); err != nil {
		return nil, 0, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status, f.version, f.version > lastSeen, nil
}

func (f *fakeProvider) GetKVValue(_ context.Context, _, key string) (string, bool, error) {
	if err := f.call("kv"); err != nil {
		return "", false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.kv[key]
	return v, ok, nil
}

func (f *fakeProvider) AbandonOrchestrationItem(_ context.Context, token string, delay provider.Duration, ignoreAttempt bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.abandons = append(f.abandons, strings.Join([]string{token, delay.String(), boolString(ignoreAttempt), "(no reason)"}, " "))
	return nil
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// pendingProvider adds PendingStartReader and ReasonAbandoner to fakeProvider.
type pendingProvider struct {
	*fakeProvider
	start *provider.PendingStart
	// commitOnPeek, when set, is the history the instance's first turn commits
	// while PendingStart looks (which then finds no start).
	commitOnPeek []provider.Event
}

func (p *pendingProvider) PendingStart(context.Context, string) (*provider.PendingStart, error) {
	if err := p.call("pending_start"); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.commitOnPeek != nil {
		p.history = p.commitOnPeek
		return nil, nil
	}
	return p.start, nil
}

func (p *pendingProvider) AbandonOrchestrationItemWithReason(_ context.Context, token string, delay provider.Duration, ignoreAttempt bool, reason string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.abandons = append(p.abandons, strings.Join([]string{token, delay.String(), boolString(ignoreAttempt), reason}, " "))
	return nil
}

func startedAs(name string) provider.Event {
	return provider.Event{Kind: provider.EventOrchestrationStarted, EventID: 1, ExecutionID: 1, Name: name, Version: "1.0.0"}
}

func completedWith(out string) provider.Event {
	return provider.Event{Kind: provider.EventOrchestrationCompleted, EventID: 2, ExecutionID: 1, Output: out}
}

// waitCtx bounds a wait that is expected to succeed: generous, as the machine may
// be loaded.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestWaitForOrchestrationRidesOutRetryableErrors(t *testing.T) {
	f := newFakeProvider(startedAs("O"), completedWith("done"))
	f.fails["read"], f.fails["custom_status"] = 3, 2
	st, err := NewClient(f).WaitForOrchestration(waitCtx(t), "i")
	if err != nil || st.State != StateCompleted || st.Output != "done" {
		t.Fatalf("WaitForOrchestration = %+v, %v; want Completed with \"done\" despite 5 retryable errors", st, err)
	}
	if n := f.count("read"); n < 4 {
		t.Fatalf("history read %d times, want every retryable failure retried (at least 4)", n)
	}
}

func TestWaitForOrchestrationWaitsThroughPending(t *testing.T) {
	f := newFakeProvider()
	p := &pendingProvider{fakeProvider: f, start: &provider.PendingStart{Name: "O"}}
	c := NewClient(p)
	done := make(chan struct{})
	var st OrchestrationStatus
	var err error
	go func() {
		defer close(done)
		st, err = c.WaitForOrchestration(waitCtx(t), "i")
	}()
	for p.count("pending_start") < 2 { // it polls a Pending instance, not returns it
		select {
		case <-done:
			t.Fatalf("WaitForOrchestration returned %+v, %v for a Pending instance", st, err)
		case <-time.After(time.Millisecond):
		}
	}
	p.mu.Lock()
	p.history = []provider.Event{startedAs("O"), completedWith("done")}
	p.mu.Unlock()
	<-done
	if err != nil || st.State != StateCompleted {
		t.Fatalf("WaitForOrchestration = %+v, %v; want Completed once the instance ran", st, err)
	}
}

func TestWaitForOrchestrationReturnsPermanentErrorsAtOnce(t *testing.T) {
	f := newFakeProvider()
	f.perm = errBroken
	_, err := NewClient(f).WaitForOrchestration(waitCtx(t), "i")
	if !errors.Is(err, errBroken) || !strings.Contains(err.Error(), "wait for orchestration i") {
		t.Fatalf("WaitForOrchestration = %v; want the permanent error, naming the wait", err)
	}
	if n := f.count("read"); n != 1 {
		t.Fatalf("history read %d times; a permanent error must not be retried", n)
	}
}

func TestWaitForOrchestrationNamesTheLastProviderErrorWhenContextEnds(t *testing.T) {
	f := newFakeProvider()
	f.fails["read"] = 1 << 30
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := NewClient(f).WaitForOrchestration(ctx, "i")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), errHiccup.Error()) {
		t.Fatalf("WaitForOrchestration = %v; want the deadline, naming the last provider error", err)
	}
	if provider.IsRetryable(err) {
		t.Fatalf("a wait that ran out of time reads as retryable: %v", err)
	}
	if n := f.count("read"); n < 2 {
		t.Fatalf("history read %d times before the deadline; want retries", n)
	}
}

func TestWaitForStatusChangeRidesOutRetryableErrors(t *testing.T) {
	f := newFakeProvider(startedAs("O"))
	s := "half way"
	f.status, f.version = &s, 2
	f.fails["custom_status"], f.fails["read"] = 3, 1
	st, err := NewClient(f).WaitForStatusChange(waitCtx(t), "i", 1)
	if err != nil || st.CustomStatusVersion != 2 || st.CustomStatus == nil || *st.CustomStatus != s {
		t.Fatalf("WaitForStatusChange = %+v, %v; want version 2 %q despite retryable errors", st, err, s)
	}
}

func TestWaitForStatusChangeReturnsPermanentErrorsAtOnce(t *testing.T) {
	f := newFakeProvider(startedAs("O"))
	f.perm = errBroken
	if _, err := NewClient(f).WaitForStatusChange(waitCtx(t), "i", 0); !errors.Is(err, errBroken) {
		t.Fatalf("WaitForStatusChange = %v; want the permanent error", err)
	}
}

func TestWaitForKVRidesOutRetryableErrors(t *testing.T) {
	f := newFakeProvider()
	f.kv["k"] = "v"
	f.fails["kv"] = 4
	v, err := NewClient(f).WaitForKV(waitCtx(t), "i", "k")
	if err != nil || v != "v" {
		t.Fatalf("WaitForKV = %q, %v; want \"v\" despite 4 retryable errors", v, err)
	}
	if n := f.count("kv"); n != 5 {
		t.Fatalf("KV read %d times, want 5", n)
	}
}

func TestWaitForKVReturnsPermanentErrorsAtOnce(t *testing.T) {
	f := newFakeProvider()
	f.perm = errBroken
	_, err := NewClient(f).WaitForKV(waitCtx(t), "i", "k")
	if !errors.Is(err, errBroken) || !strings.Contains(err.Error(), "wait for kv i/k") || f.count("kv") != 1 {
		t.Fatalf("WaitForKV = %v after %d reads; want the permanent error at once, naming the wait", err, f.count("kv"))
	}
}

func TestWaitForKVNamesTheLastProviderErrorWhenContextEnds(t *testing.T) {
	f := newFakeProvider()
	f.fails["kv"] = 1 << 30
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := NewClient(f).WaitForKV(ctx, "i", "k")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), errHiccup.Error()) {
		t.Fatalf("WaitForKV = %v; want the deadline, naming the last provider error", err)
	}
}

func TestStatusOfAQueuedStartIsPending(t *testing.T) {
	for _, c := range []struct {
		name   string
		start  provider.PendingStart
		reason string
	}{
		{"NeverOffered", provider.PendingStart{Name: "Checkout", Version: "2.0.0"}, ""},
		{"OfferedOnce", provider.PendingStart{Name: "Checkout", Version: "2.0.0", Attempts: 1, LastError: "not here"}, "not here (offered 1 time)"},
		{"Refused", provider.PendingStart{Name: "Checkout", Version: "2.0.0", Attempts: 3, LastError: "not here"}, "not here (offered 3 times)"},
		{"LongReasonClipped", provider.PendingStart{Name: "Checkout", Version: "2.0.0", Attempts: 2, LastError: strings.Repeat("x", 10_000)},
			strings.Repeat("x", maxReasonBytes) + "… (offered 2 times)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &pendingProvider{fakeProvider: newFakeProvider(), start: &c.start}
			st, err := NewClient(p).Status(t.Context(), "i")
			if err != nil {
				t.Fatal(err)
			}
			want := OrchestrationStatus{State: StatePending, Name: "Checkout", Version: "2.0.0", PendingReason: c.reason}
			if st.State != want.State || st.Name != want.Name || st.Version != want.Version || st.PendingReason != want.PendingReason ||
				st.Terminal() || st.ExecutionID != 0 {
				t.Fatalf("Status = %+v, want %+v", st, want)
			}
		})
	}
}

func TestStatusOfAnExistingInstanceDoesNotLookForAPendingStart(t *testing.T) {
	p := &pendingProvider{fakeProvider: newFakeProvider(startedAs("O")), start: &provider.PendingStart{Name: "O"}}
	st, err := NewClient(p).Status(t.Context(), "i")
	if err != nil || st.State != StateRunning || st.Name != "O" {
		t.Fatalf("Status = %+v, %v; want Running", st, err)
	}
	if n := p.count("pending_start"); n != 0 {
		t.Fatalf("Status of an instance with history looked for a pending start %d times", n)
	}
}

func TestStatusWithoutStartIsNotFound(t *testing.T) {
	for name, p := range map[string]provider.Provider{
		"PendingStartReader":   &pendingProvider{fakeProvider: newFakeProvider()},
		"NoPendingStartReader": newFakeProvider(),
	} {
		t.Run(name, func(t *testing.T) {
			st, err := NewClient(p).Status(t.Context(), "i")
			if err != nil || st.State != StateNotFound || st.PendingReason != "" {
				t.Fatalf("Status = %+v, %v; want NotFound", st, err)
			}
		})
	}
}

func TestStatusReportsAFailedLookForTheStart(t *testing.T) {
	f := newFakeProvider()
	f.fails["pending_start"] = 1
	st, err := NewClient(&pendingProvider{fakeProvider: f}).Status(t.Context(), "i")
	if !provider.IsRetryable(err) || !strings.Contains(err.Error(), "orchestration status i: pending start") {
		t.Fatalf("Status = %+v, %v; want the retryable error, naming the pending start", st, err)
	}
}

func TestStatusSeesAFirstTurnThatCommitsWhileItLooksForTheStart(t *testing.T) {
	p := &pendingProvider{fakeProvider: newFakeProvider(), commitOnPeek: []provider.Event{startedAs("O"), completedWith("done")}}
	st, err := NewClient(p).Status(t.Context(), "i")
	if err != nil || st.State != StateCompleted || st.Output != "done" {
		t.Fatalf("Status = %+v, %v; want the committed instance (Completed), not NotFound", st, err)
	}
}

func TestAbandonOrchestrationRecordsTheReasonWhereTheProviderCan(t *testing.T) {
	withReason := &pendingProvider{fakeProvider: newFakeProvider()}
	if err := abandonOrchestration(t.Context(), withReason, "tok", time.Second, false, "not registered"); err != nil {
		t.Fatal(err)
	}
	plain := newFakeProvider()
	if err := abandonOrchestration(t.Context(), plain, "tok", time.Second, true, "not registered"); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(withReason.abandons, "|"), "tok 1s false not registered"; got != want {
		t.Errorf("ReasonAbandoner got %q, want %q", got, want)
	}
	if got, want := strings.Join(plain.abandons, "|"), "tok 1s true (no reason)"; got != want {
		t.Errorf("plain provider got %q, want %q (the fallback, same token, delay and attempt rule)", got, want)
	}
}

// watchingProvider adds an InstanceWatcher to fakeProvider, fired by the test.
type watchingProvider struct {
	*fakeProvider
	watchers wake.Watchers
}

func (w *watchingProvider) WatchInstance(_ context.Context, instance string) (<-chan struct{}, func()) {
	return w.watchers.Watch(instance)
}

// A wait for an instance that another process ends is woken by the provider's
// signal of that instance at once, and meanwhile reads the instance at most once
// a second (a lost signal is caught by those reads); without a watcher it reads
// every 100 ms. Fake time (synctest): nothing sleeps for real.
func TestWaitIsWokenByItsInstancesSignal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &watchingProvider{fakeProvider: newFakeProvider(startedAs("O"))}
		done := make(chan struct{})
		var st OrchestrationStatus
		var err error
		go func() {
			defer close(done)
			st, err = NewClient(w).WaitForOrchestration(t.Context(), "i")
		}()
		time.Sleep(10 * time.Second)
		if n := w.count("read"); n > 20 {
			t.Fatalf("a watched wait read the instance %d times in 10 s, want at most 20 (a read a second once settled)", n)
		}
		w.mu.Lock()
		w.history = []provider.Event{startedAs("O"), completedWith("done")}
		w.mu.Unlock()
		w.watchers.Notify("j") // another instance's signal: not this wait's
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("the wait returned on another instance's signal")
		default:
		}
		w.watchers.Notify("i")
		synctest.Wait() // no time passes: only the signal can have woken it
		select {
		case <-done:
		default:
			t.Fatal("the instance's signal did not wake the wait")
		}
		if err != nil || st.State != StateCompleted {
			t.Fatalf("WaitForOrchestration = %+v, %v; want Completed", st, err)
		}
	})
}

func TestUnwatchedWaitReadsEvery100ms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeProvider(startedAs("O"))
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if _, err := NewClient(f).WaitForOrchestration(ctx, "i"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitForOrchestration = %v, want the deadline", err)
		}
		if n := f.count("read"); n < 90 {
			t.Fatalf("an unwatched wait read the instance %d times in 10 s, want about 100", n)
		}
	})
}
