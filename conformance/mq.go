package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// QueueFactory makes fresh, empty queues for TestMessageQueue.
type QueueFactory struct {
	// New returns a new, empty queue whose only clock is now (its Options.Now): the
	// backend must compute every time from it (lock expiry, Renew, the visibility of
	// delayed and abandoned messages, session leases and activity, EnqueuedAt and the
	// failure and dead-letter times) and turn the times it waits for in a long poll into
	// durations with it (next.Sub(now()), never time.Until(next)). The suite's clock
	// stands still until a case advances it, so a lock, lease or delay ends when the
	// case says, however slowly the test runs. The suite closes the queue (register
	// nothing that double-closes; Close is idempotent anyway).
	New func(t *testing.T, now func() time.Time) mq.MessageQueue
}

// TestMessageQueue runs the mq.MessageQueue conformance suite against the queues f
// makes. Every case is a subtest with a queue and a clock of its own. A case that
// checks a lock lapse, a delay or a session lease advances its clock instead of
// sleeping. The long-poll cases (a waiting DequeueBatch woken by an Enqueue, an Ack,
// a Resume, the end of a delay, a canceled context) need real time: they run in parallel and
// wait for the event with a bound (together about a second of waiting per backend;
// go test's -parallel flag, GOMAXPROCS by default, bounds how many wait at once). A
// long-poll check that ran too slowly to tell (the event came after the Wait ended) is
// skipped, not failed, unless StrictTimingEnv is set.
func TestMessageQueue(t *testing.T, f QueueFactory) {
	t.Helper()
	if f.New == nil {
		t.Fatal("conformance: QueueFactory.New is nil")
	}
	e := env{f: f}
	for _, group := range [][]mqCase{
		batchCases,
		orderCases,
		lockCases,
		ackCases,
		tagCases,
		sessionCases,
		keyAttrCases,
		messageKeyCases,
		waitCases,
		concurrencyCases,
		inputCases,
		orderFailureCases,
		boundCases,
		multiBatchCases,
		settleCases,
		adminCases,
		batchInputCases,
		traceCases,
		dedupCases,
		pauseCases,
		limitCases,
		priorityCases,
	} {
		for _, c := range group {
			t.Run(c.name, func(t *testing.T) { c.run(t, e) })
		}
	}
}

// mqCase is one subtest of TestMessageQueue. A case that waits in real time (a long
// poll) calls t.Parallel first; every case opens its own queue with env.open or
// env.openClock.
type mqCase struct {
	name string
	run  func(t *testing.T, e env)
}

// qn is the queue most cases use; each case has a fresh backend, so names never clash.
const qn = "conformance"

// env gives cases the factory.
type env struct{ f QueueFactory }

// open makes a fresh queue (on a clock of its own that nobody moves) and closes it
// when the test ends.
func (e env) open(t *testing.T) mq.MessageQueue {
	t.Helper()
	q, _ := e.openClock(t)
	return q
}

// openClock makes a fresh queue and returns it with its clock, which the case
// advances to let locks, leases and delays end; the queue is closed when the test ends.
func (e env) openClock(t *testing.T) (mq.MessageQueue, mqClock) {
	t.Helper()
	clk := mqClock{&esClock{now: mqEpoch}}
	q := e.f.New(t, clk.Now)
	if q == nil {
		t.Fatal("conformance: QueueFactory.New returned a nil queue")
	}
	t.Cleanup(func() {
		if err := q.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return q, clk
}

// mqEpoch is where every case's clock starts (a whole second, so that a backend
// storing milliseconds or microseconds keeps every time the suite makes exactly).
var mqEpoch = time.Date(2031, 2, 3, 4, 5, 6, 0, time.UTC)

// mqClock is a case's clock, the only one its queue reads: it stands still until the
// case moves it (safe for concurrent use, as the queue reads it from any goroutine).
type mqClock struct{ *esClock }

// to moves the clock forward to at; it never moves back.
func (c mqClock) to(at time.Time) {
	if d := at.Sub(c.Now()); d > 0 {
		c.Advance(d)
	}
}

// justBefore moves the clock to margin before at: a lock, lease or delay that ends
// at at still holds.
func (c mqClock) justBefore(at time.Time) { c.to(at.Add(-margin)) }

// past moves the clock margin past at: a lock, lease or delay that ends at at is over.
func (c mqClock) past(at time.Time) { c.to(at.Add(margin)) }

// lt is the short lock timeout (and session lease, and delay) of the cases that watch
// one end; the case's clock, not real time, makes it pass.
const lt = 200 * time.Millisecond

// margin is how close to its end a lock, lease or delay is checked to still hold, and
// how far past its end to be over.
const margin = 10 * time.Millisecond

// tol is the tolerance for comparing a time the backend reports with the case's clock
// (a backend may store times at millisecond resolution).
const tol = time.Millisecond

// long is a lock timeout no case outlives.
const long = time.Minute

// short is DequeueOptions with the short lock timeout lt.
var short = mq.DequeueOptions{LockTimeout: lt}

// msg is an un-keyed message of the queue qn.
func msg(payload string) mq.Message { return mq.Message{Queue: qn, Payload: []byte(payload)} }

// kmsg is a message of the queue qn with a routing key.
func kmsg(key, payload string) mq.Message {
	return mq.Message{Queue: qn, RoutingKey: key, Payload: []byte(payload)}
}

// put enqueues msgs and fails the test on error.
func put(t *testing.T, q mq.MessageQueue, msgs ...mq.Message) {
	t.Helper()
	if err := q.Enqueue(t.Context(), msgs...); err != nil {
		t.Fatalf("Enqueue of %d valid message(s) failed: %v", len(msgs), err)
	}
}

// fetch dequeues from qn with opts and fails the test on error.
func fetch(t *testing.T, q mq.MessageQueue, opts mq.DequeueOptions) *mq.Batch {
	t.Helper()
	return fetchFrom(t, q, qn, opts)
}

func fetchFrom(t *testing.T, q mq.MessageQueue, queue string, opts mq.DequeueOptions) *mq.Batch {
	t.Helper()
	b, err := q.DequeueBatch(t.Context(), queue, opts)
	if err != nil {
		t.Fatalf("DequeueBatch(%q) failed: %v", queue, err)
	}
	if b != nil {
		checkBatchShape(t, queue, b)
	}
	return b
}

// checkBatchShape checks what holds for every batch.
func checkBatchShape(t *testing.T, queue string, b *mq.Batch) {
	t.Helper()
	if b.Queue != queue {
		t.Errorf("batch from queue %q reports Queue %q", queue, b.Queue)
	}
	if b.Token == "" {
		t.Errorf("batch %s has an empty lock token", describe(b))
	}
	if len(b.Messages) == 0 {
		t.Fatalf("DequeueBatch returned a batch without messages (key %q)", b.RoutingKey)
	}
	if b.RoutingKey == "" && len(b.Messages) != 1 {
		t.Errorf("un-keyed batch %s has %d messages, want exactly 1", describe(b), len(b.Messages))
	}
	for i, d := range b.Messages {
		if d.Payload == nil {
			t.Errorf("message %d (id %d) of batch %s has a nil Payload; payloads are never nil", i, d.ID, describe(b))
		}
		if d.Attempt < 1 {
			t.Errorf("message %d (id %d) of batch %s has Attempt %d, want >= 1 after a fetch", i, d.ID, describe(b), d.Attempt)
		}
		if i > 0 && d.ID <= b.Messages[i-1].ID {
			t.Errorf("batch %s is not in enqueue order: id %d follows id %d", describe(b), d.ID, b.Messages[i-1].ID)
		}
	}
}

// mustFetch dequeues from qn and fails unless a batch is returned.
func mustFetch(t *testing.T, q mq.MessageQueue, opts mq.DequeueOptions, rule string) *mq.Batch {
	t.Helper()
	b := fetch(t, q, opts)
	if b == nil {
		t.Fatalf("%s: DequeueBatch returned nothing", rule)
	}
	return b
}

// mustFetchNothing dequeues from qn and fails if a batch is returned.
func mustFetchNothing(t *testing.T, q mq.MessageQueue, opts mq.DequeueOptions, rule string) {
	t.Helper()
	if b := fetch(t, q, opts); b != nil {
		t.Fatalf("%s: DequeueBatch returned %s", rule, describe(b))
	}
}

// StrictTimingEnv names the environment variable that makes an inconclusive timing
// check fail instead of skip. duroq's CI sets it: there a timing check must never
// pass by skipping, which would hide a bug on a slow run. Only the long-poll cases,
// which wait in real time, have such checks; locks, leases and delays follow the
// case's clock and are always conclusive.
const StrictTimingEnv = "DUROQ_STRICT_TIMING"

// inconclusive ends a case whose real-time check could not tell (the test ran too
// slowly): skipped, saying so, or failed when StrictTimingEnv is set.
func inconclusive(t *testing.T, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...) + " (the test ran too slowly)"
	if os.Getenv(StrictTimingEnv) != "" {
		t.Fatalf("inconclusive, and %s is set: %s", StrictTimingEnv, why)
	}
	t.Skip("inconclusive: " + why)
}

// fetchPayloads dequeues from qn and wants a batch with exactly the payloads want, in order.
func fetchPayloads(t *testing.T, q mq.MessageQueue, opts mq.DequeueOptions, rule string, want ...string) *mq.Batch {
	t.Helper()
	b := mustFetch(t, q, opts, rule)
	wantPayloads(t, b, rule, want...)
	return b
}

// wantPayloads fails unless b holds exactly the payloads want, in order.
func wantPayloads(t *testing.T, b *mq.Batch, rule string, want ...string) {
	t.Helper()
	got := payloads(b)
	if !equalStrings(got, want) {
		t.Fatalf("%s: got batch %s, want payloads %q", rule, describe(b), want)
	}
}

// wantAttempts fails unless the messages of b have exactly the attempt counts want.
func wantAttempts(t *testing.T, b *mq.Batch, rule string, want ...int) {
	t.Helper()
	got := make([]int, len(b.Messages))
	for i, d := range b.Messages {
		got[i] = d.Attempt
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: batch %s has attempts %v, want %v", rule, describe(b), got, want)
	}
}

func payloads(b *mq.Batch) []string {
	out := make([]string, len(b.Messages))
	for i, d := range b.Messages {
		out[i] = string(d.Payload)
	}
	return out
}

func ids(b *mq.Batch) []int64 {
	out := make([]int64, len(b.Messages))
	for i, d := range b.Messages {
		out[i] = d.ID
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// describe renders a batch for failure messages.
func describe(b *mq.Batch) string {
	if b == nil {
		return "<nil batch>"
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "{key %q, messages [", b.RoutingKey)
	for i, d := range b.Messages {
		if i > 0 {
			sb.WriteString(", ")
		}
		p := string(d.Payload)
		if len(p) > 40 {
			p = p[:40] + "..."
		}
		fmt.Fprintf(&sb, "id %d %q attempt %d", d.ID, p, d.Attempt)
		if d.Tag != "" {
			fmt.Fprintf(&sb, " tag %q", d.Tag)
		}
		if d.Session != "" {
			fmt.Fprintf(&sb, " session %q", d.Session)
		}
		if d.Key != "" {
			fmt.Fprintf(&sb, " key %q", d.Key)
		}
	}
	sb.WriteString("]}")
	return sb.String()
}

// ack acks b and fails the test on error.
func ack(t *testing.T, q mq.MessageQueue, b *mq.Batch, then ...mq.Message) {
	t.Helper()
	if err := q.Ack(t.Context(), b.Token, then...); err != nil {
		t.Fatalf("Ack of the live batch %s failed: %v", describe(b), err)
	}
}

// abandon abandons b and fails the test on error.
func abandon(t *testing.T, q mq.MessageQueue, b *mq.Batch, opts mq.AbandonOptions) {
	t.Helper()
	if err := q.Abandon(t.Context(), b.Token, opts); err != nil {
		t.Fatalf("Abandon of the live batch %s failed: %v", describe(b), err)
	}
}

// wantErr fails unless err matches target, and unless its text names op (compared
// case-insensitively, ignoring spaces, '_' and '-', so "PurgeKey" matches "purge key").
func wantErr(t *testing.T, err, target error, op, rule string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: %s succeeded, want an error matching %v", rule, op, target)
	}
	if !errors.Is(err, target) {
		t.Fatalf("%s: %s failed with %v (%T), want an error matching %v with errors.Is", rule, op, err, err, target)
	}
	if !mentions(err.Error(), op) {
		t.Errorf("%s: the error text %q does not name the operation %q", rule, err.Error(), op)
	}
}

// wantLockLost fails unless err matches mq.ErrLockLost.
func wantLockLost(t *testing.T, err error, op, rule string) {
	t.Helper()
	wantErr(t, err, mq.ErrLockLost, op, rule)
}

func normalize(s string) string {
	return strings.NewReplacer(" ", "", "_", "", "-", "").Replace(strings.ToLower(s))
}

func mentions(text, op string) bool { return strings.Contains(normalize(text), normalize(op)) }

// stats returns the message counts of queue (MaxAttempt, NextVisible and
// OldestReady, checked on their own, are left out so counts compare as a whole).
func stats(t *testing.T, q mq.MessageQueue, queue string) mq.Stats {
	t.Helper()
	s, err := q.Stats(t.Context(), queue)
	if err != nil {
		t.Fatalf("Stats(%q) failed: %v", queue, err)
	}
	s.MaxAttempt, s.NextVisible, s.OldestReady = 0, time.Time{}, time.Time{}
	return s
}

// wantStats fails unless the stats of queue are want.
func wantStats(t *testing.T, q mq.MessageQueue, queue string, want mq.Stats, rule string) {
	t.Helper()
	if got := stats(t, q, queue); got != want {
		t.Fatalf("%s: Stats(%q) = %+v, want %+v", rule, queue, got, want)
	}
}

// wantEmpty fails unless queue holds no message at all.
func wantEmpty(t *testing.T, q mq.MessageQueue, queue, rule string) {
	t.Helper()
	wantStats(t, q, queue, mq.Stats{}, rule)
}

// wantTime fails unless got is want, within tol: a time the backend computed from
// the case's clock.
func wantTime(t *testing.T, got, want time.Time, what string) {
	t.Helper()
	if d := got.Sub(want); d < -tol || d > tol {
		t.Errorf("%s is %v, want %v (the queue's clock, tolerance %v)", what, got, want, tol)
	}
}

// canceledCtx returns a context that is already canceled.
func canceledCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}

// withSession returns opts for owner with lease.
func withSession(owner string, lease time.Duration) mq.DequeueOptions {
	return mq.DequeueOptions{Session: &mq.SessionOptions{Owner: owner, LeaseTimeout: lease}}
}

// wantErrIs fails unless err matches target; unlike wantErr it does not look at the text.
func wantErrIs(t *testing.T, err, target error, call, rule string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: %s succeeded, want an error matching %v", rule, call, target)
	}
	if !errors.Is(err, target) {
		t.Fatalf("%s: %s failed with %v (%T), want an error matching %v with errors.Is", rule, call, err, err, target)
	}
}

// call runs fn and turns a panic into a failure naming what panicked.
func call(t *testing.T, what string, fn func() error) error {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s panicked: %v; bad input must be rejected with an error, never a panic", what, r)
		}
	}()
	return fn()
}

// call2 is call for methods that return a value too.
func call2[T any](t *testing.T, what string, fn func() (T, error)) (v T, err error) {
	t.Helper()
	err = call(t, what, func() error {
		var e error
		v, e = fn()
		return e
	})
	return v, err
}
