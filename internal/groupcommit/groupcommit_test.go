package groupcommit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// blockingApply records rounds; the first round waits for release.
type recorder struct {
	mu      sync.Mutex
	rounds  [][]string
	entered chan struct{} // a round started
	release chan struct{} // closed: rounds may finish
}

func newRecorder() *recorder {
	return &recorder{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (r *recorder) apply(ctx context.Context, items []string) error {
	r.mu.Lock()
	r.rounds = append(r.rounds, slices.Clone(items))
	r.mu.Unlock()
	r.entered <- struct{}{}
	select {
	case <-r.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	if slices.Contains(items, "bad") {
		return errors.New("bad item")
	}
	return nil
}

// leadFirst has a caller lead a round of "first", held until r.release, and
// returns its outcome.
func leadFirst(g *Group[string], r *recorder) <-chan error {
	first := make(chan error, 1)
	go func() { first <- g.Do(context.Background(), "first") }()
	<-r.entered
	return first
}

// waitPending waits until n requests wait for the next round.
func waitPending[T any](t *testing.T, g *Group[T], n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		g.mu.Lock()
		got := len(g.pending)
		g.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests pending, want %d", got, n)
		}
	}
}

func TestRequestsWaitingTogetherShareARound(t *testing.T) {
	r := newRecorder()
	g := New(r.apply)
	first := leadFirst(g, r)
	errs := make(chan error, 5)
	for _, it := range []string{"a", "b", "c", "d", "e"} {
		go func() { errs <- g.Do(context.Background(), it) }()
	}
	waitPending(t, g, 5)
	close(r.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(r.rounds) != 2 || len(r.rounds[1]) != 5 {
		t.Fatalf("rounds %v, want [first] then the five that waited together", r.rounds)
	}
}

func TestFailedRoundIsAppliedRequestByRequest(t *testing.T) {
	r := newRecorder()
	g := New(r.apply)
	type outcome struct {
		item string
		err  error
	}
	out := make(chan outcome, 4)
	do := func(it string) { out <- outcome{it, g.Do(context.Background(), it)} }
	go do("first")
	<-r.entered
	for _, it := range []string{"a", "bad", "b"} {
		go do(it)
	}
	waitPending(t, g, 3)
	close(r.release)
	for range 4 {
		o := <-out
		if (o.err != nil) != (o.item == "bad") {
			t.Errorf("Do(%q) = %v; only the bad item may fail", o.item, o.err)
		}
	}
	// first; the round of three; then each of the three alone.
	if len(r.rounds) != 5 {
		t.Fatalf("rounds %v, want the failed round of three applied again one by one", r.rounds)
	}
}

func TestRequestWithdrawnWhenItsContextEndsBeforeARoundTookIt(t *testing.T) {
	r := newRecorder()
	g := New(r.apply)
	first := leadFirst(g, r)
	ctx, cancel := context.WithCancel(context.Background())
	late := make(chan error, 1)
	go func() { late <- g.Do(ctx, "late") }()
	waitPending(t, g, 1)
	cancel()
	if err := <-late; !errors.Is(err, context.Canceled) {
		t.Fatalf("withdrawn Do = %v, want context.Canceled", err)
	}
	close(r.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if len(r.rounds) != 1 {
		t.Fatalf("rounds %v: the withdrawn request was applied", r.rounds)
	}
}

func TestTakenRequestWaitsForItsOutcome(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	// A commit in flight: it finishes whatever the context says.
	g := New(func(ctx context.Context, items []string) error {
		close(entered)
		<-release
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Do(ctx, "mine") }()
	<-entered // taken: its round is being applied
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Do returned %v while its round was still being applied", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Do = %v, want the round's outcome (applied)", err)
	}
}

func TestRoundRunsWhileOneOfItsCallersStillWantsIt(t *testing.T) {
	r := newRecorder()
	g := New(r.apply)
	first := leadFirst(g, r)
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { errs <- g.Do(ctx, "gives up") }()
	go func() { errs <- g.Do(context.Background(), "stays") }()
	waitPending(t, g, 2)
	close(r.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	<-r.entered // the round of two started
	cancel()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("a round one caller still wanted failed: %v", err)
		}
	}
}
