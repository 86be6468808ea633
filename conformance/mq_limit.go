package conformance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// limitCases: Admin.SetLimit. A queue's limit and its groups' bound the batches in
// flight and the messages delivered per interval; a blocked group leaves the other
// messages' order alone; a settled, abandoned or lapsed batch gives its place back;
// a rate's bucket refills with the backend's clock.
var limitCases = []mqCase{
	{"InFlightLimitBoundsTheQueuesBatches", testInFlightLimitBoundsTheQueuesBatches},
	{"GroupLimitHoldsBackOnlyItsGroup", testGroupLimitHoldsBackOnlyItsGroup},
	{"QueueAndGroupLimitsBothApply", testQueueAndGroupLimitsBothApply},
	{"RateRefillsWithTheClock", testRateRefillsWithTheClock},
	{"RateCutsAKeyedBatchInOrder", testRateCutsAKeyedBatchInOrder},
	{"KeyedBatchCountsForEachGroupOfItsMessages", testKeyedBatchCountsForEachGroupOfItsMessages},
	{"LimitsAreListedChangedAndRemoved", testLimitsAreListedChangedAndRemoved},
	{"LimitGroupIsKeptAndShown", testLimitGroupIsKeptAndShown},
	{"SetLimitRejectsBadInput", testSetLimitRejectsBadInput},
	{"WaitOnAFullLimitIsWokenByAck", testWaitOnAFullLimitIsWokenByAck},
}

// setLimit sets a limit and fails the test on error.
func setLimit(t *testing.T, a mq.Admin, queue, group string, l mq.Limit) {
	t.Helper()
	if err := a.SetLimit(t.Context(), queue, group, l); err != nil {
		t.Fatalf("SetLimit(%q, %q, %+v) failed: %v", queue, group, l, err)
	}
}

// gmsg is an un-keyed message of qn in limit group g.
func gmsg(g, payload string) mq.Message {
	return mq.Message{Queue: qn, LimitGroup: g, Payload: []byte(payload)}
}

// fetchAll takes up to max batches of qn and returns their payloads, batch by
// batch.
func fetchAll(t *testing.T, q mq.MessageQueue, max int) ([]*mq.Batch, []string) {
	t.Helper()
	bs, err := q.DequeueBatches(t.Context(), qn, mq.DequeueOptions{LockTimeout: long}, max)
	if err != nil {
		t.Fatalf("DequeueBatches failed: %v", err)
	}
	var got []string
	for _, b := range bs {
		got = append(got, payloads(b)...)
	}
	return bs, got
}

// wantLimits fails unless Limits lists want.
func wantLimits(t *testing.T, a mq.Admin, rule string, want ...mq.LimitInfo) {
	t.Helper()
	got, err := a.Limits(t.Context(), qn)
	if err != nil {
		t.Fatalf("%s: Limits failed: %v", rule, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: Limits = %+v, want %+v", rule, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: Limits = %+v, want %+v", rule, got, want)
		}
	}
}

func testInFlightLimitBoundsTheQueuesBatches(t *testing.T, e env) {
	q, clk := e.openClock(t)
	a := asAdmin(t, q)
	setLimit(t, a, qn, "", mq.Limit{MaxInFlight: 2})
	put(t, q, msg("u1"), kmsg("A", "a1"), kmsg("A", "a2"), msg("u2"), msg("u3"), msg("u4"), msg("u5"))
	bs, got := fetchAll(t, q, 10)
	if !equalStrings(got, []string{"u1", "a1", "a2"}) {
		t.Fatalf("DequeueBatches(10) under MaxInFlight 2 = %q; want the first two batches, u1 and key A's", got)
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "two batches in flight fill MaxInFlight 2")
	ack(t, q, bs[0])
	u2 := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: lt}, "an ack gives its place back", "u2")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "two batches in flight again")
	abandon(t, q, bs[1], mq.AbandonOptions{Delay: long})
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "an abandoned batch gives its place back", "u3")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "u2 and u3 in flight")
	clk.past(u2.LockedUntil)
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "a lapsed lock gives its place back (u2 is visible again, after u4 and u5 by visibility)", "u4")
	wantLimits(t, a, "u3 and u4 in flight", mq.LimitInfo{Limit: mq.Limit{MaxInFlight: 2}, InFlight: 2})
}

func testGroupLimitHoldsBackOnlyItsGroup(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	setLimit(t, a, qn, "g", mq.Limit{MaxInFlight: 1})
	put(t, q, gmsg("g", "g1"), gmsg("g", "g2"), gmsg("h", "h1"), msg("u1"), gmsg("g", "g3"), gmsg("h", "h2"))
	bs, got := fetchAll(t, q, 10)
	if !equalStrings(got, []string{"g1", "h1", "u1", "h2"}) {
		t.Fatalf("DequeueBatches(10) with group g at MaxInFlight 1 = %q; want g1 then the messages of other groups in order", got)
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "group g's one batch is in flight")
	settle(t, q, mq.Settlement{Token: bs[0].Token, Acked: 1})
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "a settled batch gives its group's place back, in order", "g2")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "g2 holds group g's place")
	wantLimits(t, a, "g2 in flight", mq.LimitInfo{Group: "g", Limit: mq.Limit{MaxInFlight: 1}, InFlight: 1})
}

func testQueueAndGroupLimitsBothApply(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	setLimit(t, a, qn, "", mq.Limit{MaxInFlight: 3})
	setLimit(t, a, qn, "g", mq.Limit{MaxInFlight: 1})
	put(t, q, gmsg("g", "g1"), gmsg("g", "g2"), msg("u1"), msg("u2"), msg("u3"))
	bs, got := fetchAll(t, q, 10)
	if !equalStrings(got, []string{"g1", "u1", "u2"}) {
		t.Fatalf("DequeueBatches(10) under queue MaxInFlight 3 and group g MaxInFlight 1 = %q; want g1, u1, u2", got)
	}
	ack(t, q, bs[0])
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "g1's ack frees a place of the queue and of g", "g2")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "the queue holds 3 batches")
	wantLimits(t, a, "three batches, one of group g", mq.LimitInfo{Limit: mq.Limit{MaxInFlight: 3}, InFlight: 3},
		mq.LimitInfo{Group: "g", Limit: mq.Limit{MaxInFlight: 1}, InFlight: 1})
}

func testRateRefillsWithTheClock(t *testing.T, e env) {
	q, clk := e.openClock(t)
	a := asAdmin(t, q)
	setLimit(t, a, qn, "", mq.Limit{Rate: 3, Per: 3 * time.Second})
	for _, p := range []string{"u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8"} {
		put(t, q, msg(p))
	}
	bs, got := fetchAll(t, q, 10)
	if !equalStrings(got, []string{"u1", "u2", "u3"}) {
		t.Fatalf("DequeueBatches(10) under Rate 3 per 3s = %q; want the full bucket's burst, u1 to u3", got)
	}
	for _, b := range bs {
		ack(t, q, b) // acks give no tokens back
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "the bucket is empty")
	start := clk.Now()
	clk.justBefore(start.Add(time.Second))
	mustFetchNothing(t, q, mq.DequeueOptions{}, "the first token comes a second after the bucket emptied")
	clk.past(start.Add(time.Second))
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "one token a second", "u4")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "u4 took the token")
	clk.past(start.Add(time.Hour))
	_, got = fetchAll(t, q, 10)
	if !equalStrings(got, []string{"u5", "u6", "u7"}) {
		t.Fatalf("after an hour DequeueBatches(10) = %q; want 3 (the bucket holds at most Rate)", got)
	}
}

func testRateCutsAKeyedBatchInOrder(t *testing.T, e env) {
	q, clk := e.openClock(t)
	a := asAdmin(t, q)
	setLimit(t, a, qn, "g", mq.Limit{Rate: 2, Per: time.Minute})
	var msgs []mq.Message
	for _, p := range []string{"a1", "a2", "a3", "a4", "a5"} {
		m := kmsg("A", p)
		m.LimitGroup = "g"
		msgs = append(msgs, m)
	}
	put(t, q, msgs...)
	b := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "a keyed batch is cut to the 2 tokens", "a1", "a2")
	ack(t, q, b)
	mustFetchNothing(t, q, mq.DequeueOptions{}, "no token left")
	start := clk.Now()
	clk.past(start.Add(30 * time.Second))
	b = fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "one token after half the interval: the key's next message", "a3")
	abandon(t, q, b, mq.AbandonOptions{})
	clk.past(start.Add(time.Minute + 30*time.Second))
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "the abandoned a3 first: tokens are spent on delivery, order kept", "a3", "a4")
}

func testKeyedBatchCountsForEachGroupOfItsMessages(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	setLimit(t, a, qn, "g", mq.Limit{MaxInFlight: 1})
	setLimit(t, a, qn, "h", mq.Limit{MaxInFlight: 1})
	first := kmsg("A", "a1")
	second := kmsg("A", "a2")
	second.LimitGroup = "h"
	put(t, q, first, second, gmsg("h", "h1"), gmsg("g", "g1"))
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key A's batch is admitted by its first message (no group)", "a1", "a2")
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "a2 holds group h's place: g1 comes next", "g1")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "groups g and h are full")
	wantLimits(t, a, "one batch in each group", mq.LimitInfo{Group: "g", Limit: mq.Limit{MaxInFlight: 1}, InFlight: 1},
		mq.LimitInfo{Group: "h", Limit: mq.Limit{MaxInFlight: 1}, InFlight: 1})
}

func testLimitsAreListedChangedAndRemoved(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	wantLimits(t, a, "a queue without limits")
	setLimit(t, a, qn, "z", mq.Limit{Rate: 5, Per: time.Second})
	setLimit(t, a, qn, "", mq.Limit{MaxInFlight: 1})
	setLimit(t, a, qn, "b", mq.Limit{MaxInFlight: 2, Rate: 1, Per: time.Hour})
	setLimit(t, a, "other", "", mq.Limit{MaxInFlight: 9})
	wantLimits(t, a, "the queue's own limit first, then by group",
		mq.LimitInfo{Limit: mq.Limit{MaxInFlight: 1}},
		mq.LimitInfo{Group: "b", Limit: mq.Limit{MaxInFlight: 2, Rate: 1, Per: time.Hour}},
		mq.LimitInfo{Group: "z", Limit: mq.Limit{Rate: 5, Per: time.Second}})
	put(t, q, msg("u1"), msg("u2"))
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "MaxInFlight 1", "u1")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "MaxInFlight 1 is full")
	setLimit(t, a, qn, "", mq.Limit{MaxInFlight: 2})
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "a raised limit admits more", "u2")
	setLimit(t, a, qn, "", mq.Limit{})
	setLimit(t, a, qn, "b", mq.Limit{})
	setLimit(t, a, qn, "never-set", mq.Limit{})
	wantLimits(t, a, "the zero Limit removes a limit", mq.LimitInfo{Group: "z", Limit: mq.Limit{Rate: 5, Per: time.Second}})
	put(t, q, msg("u3"))
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "without its limit the queue delivers", "u3")
}

func testLimitGroupIsKeptAndShown(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, gmsg("g", "g1"))
	settle(t, q, mq.Settlement{Token: mustFetch(t, q, mq.DequeueOptions{}, "g1").Token, DeadLettered: 1, DeadLetterQueue: "dlq"})
	setLimit(t, a, qn, "g", mq.Limit{MaxInFlight: 1})
	put(t, q, gmsg("g", "g2"))
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "g2", "g2")
	redrive(t, a, mq.RedriveOptions{}, 1, "Redrive of g1")
	if infos := peekAll(t, a, qn, mq.PeekOptions{}); len(infos) != 2 || infos[0].LimitGroup != "g" || infos[1].LimitGroup != "g" {
		t.Fatalf("Peek = %+v; want g1 and g2 in group g (a dead letter and its redrive keep the group)", infos)
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "the redriven g1 is in group g, whose place g2 holds")
}

func testSetLimitRejectsBadInput(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	for _, c := range []struct {
		queue, group string
		l            mq.Limit
		why          string
	}{
		{"", "", mq.Limit{MaxInFlight: 1}, "no queue"},
		{qn, strings.Repeat("g", mq.MaxNameSize+1), mq.Limit{MaxInFlight: 1}, "a group name beyond MaxNameSize"},
		{qn, "bad\xff", mq.Limit{MaxInFlight: 1}, "a group name that is not UTF-8"},
		{qn, "", mq.Limit{MaxInFlight: -1}, "a negative MaxInFlight"},
		{qn, "", mq.Limit{MaxInFlight: mq.MaxLimitValue + 1}, "MaxInFlight beyond MaxLimitValue"},
		{qn, "", mq.Limit{Rate: -1, Per: time.Second}, "a negative Rate"},
		{qn, "", mq.Limit{Rate: 1}, "a Rate without Per"},
		{qn, "", mq.Limit{Rate: 1, Per: -time.Second}, "a negative Per"},
		{qn, "", mq.Limit{Rate: 1, Per: mq.MaxLimitPer + time.Second}, "Per beyond MaxLimitPer"},
		{qn, "", mq.Limit{Per: time.Second}, "a Per without Rate"},
	} {
		err := call(t, "SetLimit", func() error { return a.SetLimit(t.Context(), c.queue, c.group, c.l) })
		wantErr(t, err, mq.ErrInvalid, "set limit", c.why)
		wantShort(t, err, "SetLimit with "+c.why)
	}
	long := mq.Message{Queue: qn, LimitGroup: strings.Repeat("g", mq.MaxNameSize+1)}
	wantErr(t, call(t, "Enqueue", func() error { return q.Enqueue(t.Context(), long) }), mq.ErrInvalid, "enqueue", "a LimitGroup beyond MaxNameSize")
	wantLimits(t, a, "the rejected calls set nothing")
	wantEmpty(t, q, qn, "the rejected Enqueue stored nothing")
	err := call(t, "SetLimit", func() error { return a.SetLimit(canceledCtx(t), qn, "", mq.Limit{MaxInFlight: 1}) })
	wantErrIs(t, err, context.Canceled, "SetLimit", "a call with a canceled context must return the context's error")
	wantLimits(t, a, "a canceled SetLimit sets nothing")

	if err := q.Close(); err != nil {
		t.Fatalf("Close failed: %v", err)
	}
	wantErr(t, call(t, "SetLimit", func() error { return a.SetLimit(t.Context(), qn, "", mq.Limit{MaxInFlight: 1}) }), mq.ErrClosed, "set limit", "a call after Close")
	_, err = call2(t, "Limits", func() ([]mq.LimitInfo, error) { return a.Limits(t.Context(), qn) })
	wantErr(t, err, mq.ErrClosed, "list limits", "a call after Close")
}

func testWaitOnAFullLimitIsWokenByAck(t *testing.T, e env) {
	t.Parallel()
	q := e.open(t)
	a := asAdmin(t, q)
	setLimit(t, a, qn, "", mq.Limit{MaxInFlight: 1})
	put(t, q, msg("u1"), msg("u2"))
	held := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u1", "u1")
	wantWokenBy(t, q, "on a queue at its MaxInFlight", "the Ack of a batch", func() error { return q.Ack(t.Context(), held.Token) }, "u2")
}
