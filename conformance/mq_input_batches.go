package conformance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// batchInputCases: bad input to DequeueBatches, Settle and mq.Admin, Close and
// context cancellation, and error texts that stay short whatever the input.
var batchInputCases = []mqCase{
	{"EnormousTokensGiveShortLockLostErrors", testEnormousTokensGiveShortLockLostErrors},
	{"LongNamesGiveShortErrors", testLongNamesGiveShortErrors},
	{"ClosedQueueFailsTheBatchAndAdminMethods", testClosedQueueFailsTheBatchAndAdminMethods},
	{"CanceledContextFailsTheBatchAndAdminMethods", testCanceledContextFailsTheBatchAndAdminMethods},
}

// shortErr is the longest error text a call may return, whatever its input.
const shortErr = 1 << 10

// wantShort fails unless err's text is shorter than shortErr.
func wantShort(t *testing.T, err error, rule string) {
	t.Helper()
	if n := len(err.Error()); n >= shortErr {
		t.Errorf("%s: the error text has %d bytes (%.100q...); error texts must clip their input", rule, n, err.Error())
	}
}

func testEnormousTokensGiveShortLockLostErrors(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("u1"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "u1", "u1")
	huge := strings.Repeat("t", 1<<20)
	for _, c := range []struct {
		op string
		fn func() error
	}{
		{"ack", func() error { return q.Ack(t.Context(), huge) }},
		{"abandon", func() error { return q.Abandon(t.Context(), huge, mq.AbandonOptions{}) }},
		{"renew", func() error { _, err := q.Renew(t.Context(), huge, long); return err }},
		{"lock", func() error { _, err := q.Lock(t.Context(), huge); return err }},
	} {
		err := call(t, c.op, c.fn)
		wantLockLost(t, err, c.op, "a 1 MiB token")
		wantShort(t, err, c.op+" with a 1 MiB token")
	}
	err := call(t, "settle", func() error {
		return q.Settle(t.Context(), mq.Settlement{Token: huge, Acked: 1}, mq.Settlement{Token: b.Token, Acked: 1})
	})
	wantSettleLost(t, err, "a Settle with a 1 MiB token and a live one", 0)
	wantShort(t, err, "Settle with a 1 MiB token")
	wantEmpty(t, q, qn, "the live settlement was applied")
}

func testLongNamesGiveShortErrors(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	full := strings.Repeat("k", mq.MaxNameSize)
	queue := strings.Repeat("q", mq.MaxNameSize)
	put(t, q, mq.Message{Queue: queue, Key: full}, msg("u1"))
	err := q.Enqueue(t.Context(), mq.Message{Queue: queue, Key: full})
	wantErr(t, err, mq.ErrDuplicateKey, "enqueue", "an Enqueue reusing a pending message key")
	wantShort(t, err, "a duplicate message key and queue name of MaxNameSize bytes")
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "u1", "u1")
	err = q.Settle(t.Context(), mq.Settlement{Token: b.Token, Acked: 1, Then: []mq.Message{{Queue: queue, Key: full}}})
	wantErrIs(t, err, mq.ErrDuplicateKey, "Settle", "a Settle whose follow-up reuses a pending message key")
	wantShort(t, err, "a Settle whose follow-up reuses a message key of MaxNameSize bytes")

	huge := strings.Repeat("n", 1<<20)
	for _, c := range []struct {
		op string
		fn func() error
	}{
		{"enqueue", func() error { return q.Enqueue(t.Context(), mq.Message{Queue: huge}) }},
		{"enqueue", func() error { return q.Enqueue(t.Context(), mq.Message{Queue: qn, RoutingKey: huge}) }},
		{"dequeue", func() error { _, err := q.DequeueBatches(t.Context(), huge, mq.DequeueOptions{}, 1); return err }},
		{"settle", func() error {
			return q.Settle(t.Context(), mq.Settlement{Token: b.Token, DeadLettered: 1, DeadLetterQueue: huge})
		}},
		{"peek", func() error { _, err := a.Peek(t.Context(), huge, mq.PeekOptions{}); return err }},
		{"peek", func() error { _, err := a.Peek(t.Context(), qn, mq.PeekOptions{RoutingKey: huge}); return err }},
		{"redrive", func() error { _, err := a.Redrive(t.Context(), huge, mq.RedriveOptions{}); return err }},
		{"redrive", func() error { _, err := a.Redrive(t.Context(), "dlq", mq.RedriveOptions{To: huge}); return err }},
		{"purge", func() error { _, err := a.Purge(t.Context(), huge, mq.PurgeOptions{}); return err }},
	} {
		err := call(t, c.op, c.fn)
		wantErr(t, err, mq.ErrInvalid, c.op, "a name of 1 MiB")
		wantShort(t, err, c.op+" with a name of 1 MiB")
	}
	if _, err := q.Lock(t.Context(), b.Token); err != nil {
		t.Fatalf("the rejected calls must leave the batch held: Lock failed with %v", err)
	}
}

func testClosedQueueFailsTheBatchAndAdminMethods(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, msg("u1"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "u1", "u1")
	if err := q.Close(); err != nil {
		t.Fatalf("Close failed: %v", err)
	}
	ctx := t.Context()
	for _, c := range []struct {
		op string
		fn func() error
	}{
		{"dequeue", func() error { _, err := q.DequeueBatches(ctx, qn, mq.DequeueOptions{}, 4); return err }},
		{"dequeue", func() error { _, err := q.DequeueBatches(ctx, qn, mq.DequeueOptions{Wait: time.Second}, 4); return err }},
		{"settle", func() error { return q.Settle(ctx, mq.Settlement{Token: b.Token, Acked: 1}) }},
		{"peek", func() error { _, err := a.Peek(ctx, qn, mq.PeekOptions{}); return err }},
		{"redrive", func() error { _, err := a.Redrive(ctx, "dlq", mq.RedriveOptions{}); return err }},
		{"purge", func() error { _, err := a.Purge(ctx, qn, mq.PurgeOptions{}); return err }},
	} {
		start := time.Now()
		err := call(t, c.op, c.fn)
		wantErr(t, err, mq.ErrClosed, c.op, "a call after Close")
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Errorf("%s after Close took %v to fail; it must fail at once", c.op, took)
		}
	}
}

func testCanceledContextFailsTheBatchAndAdminMethods(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, msg("u1"), msg("u2"))
	deadLetter(t, q, "bad")
	put(t, q, msg("u3"), msg("u4"))
	b := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u3", "u3")
	ctx := canceledCtx(t)
	for _, c := range []struct {
		op string
		fn func() error
	}{
		{"DequeueBatches", func() error { _, err := q.DequeueBatches(ctx, qn, mq.DequeueOptions{}, 4); return err }},
		{"Settle", func() error {
			return q.Settle(ctx, mq.Settlement{Token: b.Token, Acked: 1, Then: []mq.Message{msg("follow-up")}})
		}},
		{"Peek", func() error { _, err := a.Peek(ctx, qn, mq.PeekOptions{}); return err }},
		{"Redrive", func() error { _, err := a.Redrive(ctx, "dlq", mq.RedriveOptions{}); return err }},
		{"Purge", func() error { _, err := a.Purge(ctx, qn, mq.PurgeOptions{}); return err }},
	} {
		err := call(t, c.op, c.fn)
		wantErrIs(t, err, context.Canceled, c.op, "a call with a canceled context must return the context's error")
	}
	wantStats(t, q, qn, mq.Stats{Ready: 1, Locked: 1}, "calls that failed with a canceled context change nothing")
	wantStats(t, q, "dlq", mq.Stats{Ready: 2}, "calls that failed with a canceled context change nothing")
	got := fetchPayloads(t, q, mq.DequeueOptions{}, "the canceled DequeueBatches locked nothing", "u4")
	wantAttempts(t, got, "the canceled DequeueBatches did not fetch", 1)
	ack(t, q, b)
}
