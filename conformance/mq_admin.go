package conformance

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// adminCases: mq.Admin, which every backend implements: Peek, Redrive, Purge and Queues.
var adminCases = []mqCase{
	{"PeekPagesInIDOrderWithoutLocking", testPeekPagesInIDOrderWithoutLocking},
	{"PeekFiltersByRoutingKey", testPeekFiltersByRoutingKey},
	{"PeekFiltersByState", testPeekFiltersByState},
	{"PeekReportsLocksDelaysAndMetadata", testPeekReportsLocksDelaysAndMetadata},
	{"PeekLimitDefaultsAndBounds", testPeekLimitDefaultsAndBounds},
	{"RedriveMovesDeadLettersBackToTheirOrigin", testRedriveMovesDeadLettersBackToTheirOrigin},
	{"RedriveByKeyAndByIDs", testRedriveByKeyAndByIDs},
	{"RedriveToAnotherQueueAndSkipsNonDeadLetters", testRedriveToAnotherQueueAndSkipsNonDeadLetters},
	{"RedriveSkipsLockedDeadLetters", testRedriveSkipsLockedDeadLetters},
	{"RedriveKeepsTheKeyOrder", testRedriveKeepsTheKeyOrder},
	{"RedriveDropsAMessageKeyTheDestinationHolds", testRedriveDropsAMessageKeyTheDestinationHolds},
	{"RedriveRejectsInvalidInput", testRedriveRejectsInvalidInput},
	{"PurgeDeletesAllByKeyOrByIDs", testPurgeDeletesAllByKeyOrByIDs},
	{"PurgeOfALockedMessageLosesTheLock", testPurgeOfALockedMessageLosesTheLock},
	{"QueuesListsEveryQueueWithItsStats", testQueuesListsEveryQueueWithItsStats},
}

// asAdmin returns q's mq.Admin; every backend of this module must implement it.
func asAdmin(t *testing.T, q mq.MessageQueue) mq.Admin {
	t.Helper()
	a, ok := q.(mq.Admin)
	if !ok {
		t.Fatalf("the queue %T does not implement mq.Admin", q)
	}
	return a
}

// peek calls Peek and fails on error; it checks what holds for every page.
func peek(t *testing.T, a mq.Admin, queue string, opts mq.PeekOptions) []mq.MessageInfo {
	t.Helper()
	ms, err := a.Peek(t.Context(), queue, opts)
	if err != nil {
		t.Fatalf("Peek(%q, %+v) failed: %v", queue, opts, err)
	}
	limit := opts.Limit
	if limit == 0 {
		limit = mq.DefaultPeek
	}
	if len(ms) > limit {
		t.Fatalf("Peek(%q) with Limit %d returned %d messages", queue, opts.Limit, len(ms))
	}
	for i, m := range ms {
		switch {
		case m.Queue != queue:
			t.Fatalf("Peek(%q) returned %s of another queue", queue, infoString(m))
		case m.Payload == nil:
			t.Fatalf("Peek(%q) returned %s with a nil Payload; payloads are never nil", queue, infoString(m))
		case m.ID <= opts.AfterID:
			t.Fatalf("Peek(%q) with AfterID %d returned %s", queue, opts.AfterID, infoString(m))
		case opts.RoutingKey != "" && m.RoutingKey != opts.RoutingKey:
			t.Fatalf("Peek(%q) of key %q returned %s", queue, opts.RoutingKey, infoString(m))
		case opts.State != "" && m.Locked != (opts.State == mq.StateLocked):
			t.Fatalf("Peek(%q) of state %q returned %s", queue, opts.State, infoString(m))
		case i > 0 && m.ID <= ms[i-1].ID:
			t.Fatalf("Peek(%q) is not in id order: id %d follows id %d", queue, m.ID, ms[i-1].ID)
		}
	}
	return ms
}

// peekAll pages through queue with Peek, limit messages a page.
func peekAll(t *testing.T, a mq.Admin, queue string, opts mq.PeekOptions) []mq.MessageInfo {
	t.Helper()
	var all []mq.MessageInfo
	for {
		page := peek(t, a, queue, opts)
		all = append(all, page...)
		if len(page) == 0 {
			return all
		}
		opts.AfterID = page[len(page)-1].ID
	}
}

// peekID returns the message id of queue, failing if Peek does not find it.
func peekID(t *testing.T, a mq.Admin, queue string, id int64) mq.MessageInfo {
	t.Helper()
	ms := peek(t, a, queue, mq.PeekOptions{AfterID: id - 1, Limit: 1})
	if len(ms) != 1 || ms[0].ID != id {
		t.Fatalf("Peek(%q) does not find message id %d", queue, id)
	}
	return ms[0]
}

// infoPayloads returns the payloads of ms.
func infoPayloads(ms []mq.MessageInfo) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Payload)
	}
	return out
}

// infoString renders a MessageInfo for failure messages.
func infoString(m mq.MessageInfo) string {
	p := string(m.Payload)
	if len(p) > 40 {
		p = p[:40] + "..."
	}
	return fmt.Sprintf("{id %d queue %q key %q payload %q attempt %d locked %v visible %v tag %q session %q message key %q "+
		"last error %q (%d bytes) failed %v..%v origin %q dead-lettered %v}",
		m.ID, m.Queue, m.RoutingKey, p, m.Attempt, m.Locked, m.VisibleAt, m.Tag, m.Session, m.Key,
		mq.TruncateUTF8(m.LastError, 40), len(m.LastError), m.FirstFailedAt, m.LastFailedAt, m.OriginQueue, m.DeadLetteredAt)
}

// deadLetter fetches every message of qn and moves it to the queue dlq with reason.
func deadLetter(t *testing.T, q mq.MessageQueue, reason string) {
	t.Helper()
	for {
		b := fetch(t, q, mq.DequeueOptions{})
		if b == nil {
			return
		}
		settle(t, q, mq.Settlement{Token: b.Token, DeadLettered: len(b.Messages), DeadLetterQueue: "dlq", Reason: reason})
	}
}

// redrive calls Redrive on the queue dlq and fails unless it moved want messages.
func redrive(t *testing.T, a mq.Admin, opts mq.RedriveOptions, want int, rule string) {
	t.Helper()
	n, err := a.Redrive(t.Context(), "dlq", opts)
	if err != nil || n != want {
		t.Fatalf("%s: Redrive(dlq, %+v) = %d, %v; want %d, nil", rule, opts, n, err, want)
	}
}

// purge calls Purge and fails unless it deleted want messages.
func purge(t *testing.T, a mq.Admin, queue string, opts mq.PurgeOptions, want int, rule string) {
	t.Helper()
	n, err := a.Purge(t.Context(), queue, opts)
	if err != nil || n != want {
		t.Fatalf("%s: Purge(%q, %+v) = %d, %v; want %d, nil", rule, queue, opts, n, err, want)
	}
}

func testPeekPagesInIDOrderWithoutLocking(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, kmsg("A", "a1"), msg("u1"), kmsg("B", "b1"), mq.Message{Queue: qn, Payload: []byte("d1"), Delay: long},
		kmsg("A", "a2"), mq.Message{Queue: "other", Payload: []byte("o1")}, msg("u2"), kmsg("A", "a3"))
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key A", "a1", "a2", "a3")
	var pages [][]string
	opts := mq.PeekOptions{Limit: 3}
	for {
		page := peek(t, a, qn, opts)
		if len(page) == 0 {
			break
		}
		pages = append(pages, infoPayloads(page))
		opts.AfterID = page[len(page)-1].ID
	}
	if got, want := fmt.Sprint(pages), "[[a1 u1 b1] [d1 a2 u2] [a3]]"; got != want {
		t.Fatalf("Peek pages of 3 are %s, want %s: every stored message (locked, delayed, ready) in id order, paged by AfterID", got, want)
	}
	for _, m := range peekAll(t, a, qn, mq.PeekOptions{}) {
		attempt := 0 // only key A was fetched
		if m.RoutingKey == "A" {
			attempt = 1
		}
		if m.Locked != (attempt == 1) || m.Attempt != attempt {
			t.Fatalf("Peek reports %s, want key A's messages locked on attempt 1 and the others unlocked on attempt 0", infoString(m))
		}
	}
	for _, p := range []string{"u1", "b1", "u2"} {
		b := fetchPayloads(t, q, mq.DequeueOptions{}, "Peek neither locks nor fetches", p)
		wantAttempts(t, b, "Peek does not count as a fetch", 1)
	}
	if got := infoPayloads(peek(t, a, "other", mq.PeekOptions{})); !equalStrings(got, []string{"o1"}) {
		t.Fatalf("Peek(other) = %q, want [o1]", got)
	}
	if got := peek(t, a, "unknown", mq.PeekOptions{}); len(got) != 0 {
		t.Fatalf("Peek of a queue without messages returned %d messages", len(got))
	}
}

func testPeekFiltersByRoutingKey(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	var msgs []mq.Message
	var want []string
	for i := range 5 {
		p := fmt.Sprintf("a%d", i)
		want = append(want, p)
		msgs = append(msgs, kmsg("A", p), kmsg("B", fmt.Sprintf("b%d", i)), msg(fmt.Sprintf("u%d", i)))
	}
	put(t, q, msgs...)
	if got := infoPayloads(peekAll(t, a, qn, mq.PeekOptions{RoutingKey: "A", Limit: 2})); !equalStrings(got, want) {
		t.Fatalf("Peek of key A in pages of 2 = %q, want %q", got, want)
	}
	if got := peek(t, a, qn, mq.PeekOptions{RoutingKey: "none"}); len(got) != 0 {
		t.Fatalf("Peek of a key without messages returned %d messages", len(got))
	}
}

func testPeekFiltersByState(t *testing.T, e env) {
	q, clk := e.openClock(t)
	a := asAdmin(t, q)
	put(t, q, kmsg("A", "a1"), kmsg("A", "a2"), kmsg("B", "b1"), msg("u1"), mq.Message{Queue: qn, Payload: []byte("d1"), Delay: long},
		msg("u2"))
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key A", "a1", "a2")
	fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: time.Second}, "key B", "b1")
	clk.Advance(2 * time.Second) // b1's lock lapses: it is ready again, as Stats counts it
	for _, c := range []struct {
		opts mq.PeekOptions
		want []string
	}{
		{mq.PeekOptions{State: mq.StateReady}, []string{"b1", "u1", "u2"}},
		{mq.PeekOptions{State: mq.StateLocked}, []string{"a1", "a2"}},
		{mq.PeekOptions{State: mq.StateDelayed}, []string{"d1"}},
		{mq.PeekOptions{State: mq.StateLocked, RoutingKey: "B"}, nil},
		{mq.PeekOptions{State: mq.StateReady, RoutingKey: "B"}, []string{"b1"}},
		{mq.PeekOptions{State: mq.StateReady, Limit: 1}, []string{"b1", "u1", "u2"}}, // paged
	} {
		if got := infoPayloads(peekAll(t, a, qn, c.opts)); !equalStrings(got, c.want) {
			t.Fatalf("Peek with State %q, key %q = %q, want %q", c.opts.State, c.opts.RoutingKey, got, c.want)
		}
	}
	st, err := q.Stats(t.Context(), qn)
	if err != nil || st.Ready != 3 || st.Locked != 2 || st.Delayed != 1 {
		t.Fatalf("Stats = %+v, %v; want the counts Peek's states give: 3 ready, 2 locked, 1 delayed", st, err)
	}
	ms, err := call2(t, "Peek", func() ([]mq.MessageInfo, error) { return a.Peek(t.Context(), qn, mq.PeekOptions{State: "stuck"}) })
	if len(ms) != 0 {
		t.Errorf("Peek with an unknown State returned %d messages", len(ms))
	}
	wantInvalid(t, err, "peek", "Peek with an unknown State", "State")
}

func testPeekReportsLocksDelaysAndMetadata(t *testing.T, e env) {
	q, clk := e.openClock(t)
	a := asAdmin(t, q)
	enqueued := clk.Now()
	put(t, q, kmsg("A", "a1"), kmsg("A", "a2"), kmsg("A", "a3"),
		mq.Message{Queue: qn, Payload: []byte("d1"), Delay: long},
		mq.Message{Queue: qn, Payload: []byte("u1"), Tag: "gpu", Key: "k-u1"},
		mq.Message{Queue: qn, Session: "sess", Payload: nil})
	clk.Advance(time.Second)
	b := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long, MaxMessages: 2}, "key A, bounded", "a1", "a2")
	clk.Advance(time.Second)
	ms := peek(t, a, qn, mq.PeekOptions{})
	if len(ms) != 6 {
		t.Fatalf("Peek returned %d messages, want 6", len(ms))
	}
	for i, m := range ms[:2] {
		if !m.Locked || m.Attempt != 1 || m.RoutingKey != "A" || m.ID != b.Messages[i].ID {
			t.Fatalf("Peek reports %s, want message %d of the batch, locked, attempt 1", infoString(m), b.Messages[i].ID)
		}
		wantTime(t, m.VisibleAt, b.LockedUntil, "VisibleAt of a locked message (when its lock lapses)")
	}
	if m := ms[2]; m.Locked || m.Attempt != 0 {
		t.Fatalf("Peek reports %s, want a3 (held behind the bounded batch, not in it) unlocked, never fetched", infoString(m))
	}
	if m := ms[3]; m.Locked || string(m.Payload) != "d1" {
		t.Fatalf("Peek reports %s, want the delayed d1 unlocked", infoString(m))
	}
	wantTime(t, ms[3].VisibleAt, enqueued.Add(long), "VisibleAt of a delayed message")
	u := ms[4]
	if string(u.Payload) != "u1" || u.Tag != "gpu" || u.Key != "k-u1" || u.Locked || u.Attempt != 0 || u.LastError != "" ||
		!u.FirstFailedAt.IsZero() || !u.LastFailedAt.IsZero() || u.OriginQueue != "" || !u.DeadLetteredAt.IsZero() {
		t.Fatalf("Peek reports %s, want u1 with tag gpu, message key k-u1, never fetched, no failure, no dead-letter origin", infoString(u))
	}
	wantTime(t, u.EnqueuedAt, enqueued, "EnqueuedAt")
	wantTime(t, u.VisibleAt, enqueued, "VisibleAt of a ready message")
	if s := ms[5]; s.Session != "sess" || len(s.Payload) != 0 {
		t.Fatalf("Peek reports %s, want the session message with an empty payload", infoString(s))
	}

	abandoned := clk.Now()
	abandon(t, q, b, mq.AbandonOptions{Delay: long})
	clk.Advance(time.Second)
	for _, m := range peek(t, a, qn, mq.PeekOptions{RoutingKey: "A", Limit: 2}) {
		if m.Locked || m.Attempt != 1 {
			t.Fatalf("after an Abandon with a Delay Peek reports %s, want unlocked, attempt 1", infoString(m))
		}
		wantTime(t, m.VisibleAt, abandoned.Add(long), "VisibleAt of a message abandoned with a Delay")
		wantTime(t, m.LastFailedAt, abandoned, "LastFailedAt of an abandoned message")
	}
}

func testPeekLimitDefaultsAndBounds(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	msgs := make([]mq.Message, mq.DefaultPeek+50)
	for i := range msgs {
		msgs[i] = msg(fmt.Sprint(i))
	}
	put(t, q, msgs...)
	if n := len(peek(t, a, qn, mq.PeekOptions{})); n != mq.DefaultPeek {
		t.Fatalf("Peek with Limit 0 returned %d messages, want DefaultPeek (%d)", n, mq.DefaultPeek)
	}
	if n := len(peek(t, a, qn, mq.PeekOptions{Limit: mq.MaxPeek})); n != len(msgs) {
		t.Fatalf("Peek with Limit MaxPeek returned %d messages, want all %d", n, len(msgs))
	}
	if n := len(peek(t, a, qn, mq.PeekOptions{Limit: 7})); n != 7 {
		t.Fatalf("Peek with Limit 7 returned %d messages", n)
	}
	for _, c := range []struct {
		rule   string
		queue  string
		opts   mq.PeekOptions
		fields []string
	}{
		{"a negative Limit", qn, mq.PeekOptions{Limit: -1}, []string{"Limit"}},
		{"a Limit over MaxPeek", qn, mq.PeekOptions{Limit: mq.MaxPeek + 1}, []string{"Limit"}},
		{"an empty queue name", "", mq.PeekOptions{}, []string{"queue", "Queue"}},
		{"a routing key over MaxNameSize", qn, mq.PeekOptions{RoutingKey: tooLong}, []string{"RoutingKey"}},
	} {
		ms, err := call2(t, "Peek", func() ([]mq.MessageInfo, error) { return a.Peek(t.Context(), c.queue, c.opts) })
		if len(ms) != 0 {
			t.Errorf("Peek with %s returned %d messages", c.rule, len(ms))
		}
		wantInvalid(t, err, "peek", "Peek with "+c.rule, c.fields...)
	}
}

func testRedriveMovesDeadLettersBackToTheirOrigin(t *testing.T, e env) {
	q, clk := e.openClock(t)
	a := asAdmin(t, q)
	put(t, q, mq.Message{Queue: "q1", RoutingKey: "K", Payload: []byte("p1"), Key: "m1", Tag: "gpu"},
		mq.Message{Queue: "q1", Payload: []byte("p2")}, mq.Message{Queue: "q2", Payload: []byte("p3")})
	b := fetchFrom(t, q, "q1", mq.DequeueOptions{})
	abandon(t, q, b, mq.AbandonOptions{Reason: "first"})
	for _, queue := range []string{"q1", "q1", "q2"} {
		b := fetchFrom(t, q, queue, mq.DequeueOptions{})
		if b == nil {
			t.Fatalf("queue %s has a message but DequeueBatch returned nothing", queue)
		}
		settle(t, q, mq.Settlement{Token: b.Token, DeadLettered: 1, DeadLetterQueue: "dlq", Reason: "boom"})
	}
	dead := peek(t, a, "dlq", mq.PeekOptions{})
	if got := infoPayloads(dead); !equalStrings(got, []string{"p1", "p2", "p3"}) {
		t.Fatalf("the dead-letter queue holds %q, want [p1 p2 p3]", got)
	}
	clk.Advance(time.Second)
	redriven := clk.Now()
	redrive(t, a, mq.RedriveOptions{}, 3, "Redrive of every dead letter")
	clk.Advance(time.Second)
	wantEmpty(t, q, "dlq", "every dead letter was moved")
	got := append(peek(t, a, "q1", mq.PeekOptions{}), peek(t, a, "q2", mq.PeekOptions{})...)
	if len(got) != 3 {
		t.Fatalf("after Redrive the origin queues hold %d messages, want 3", len(got))
	}
	for i, m := range got {
		d := dead[i]
		if m.ID != d.ID || m.Queue != d.OriginQueue || m.RoutingKey != d.RoutingKey || m.Key != d.Key || m.Tag != d.Tag ||
			m.Attempt != 0 || m.Locked || m.OriginQueue != "" || !m.DeadLetteredAt.IsZero() || m.LastError != "boom" ||
			!m.FirstFailedAt.Equal(d.FirstFailedAt) || !m.LastFailedAt.Equal(d.LastFailedAt) {
			t.Fatalf("redriven message is %s; from the dead letter %s want the same id, key, message key and tag in its origin queue, "+
				"attempt 0, unlocked, no origin or dead-letter time, the failure history kept", infoString(m), infoString(d))
		}
		wantTime(t, m.VisibleAt, redriven, "VisibleAt of a redriven message (visible at once)")
	}
	r := fetchFrom(t, q, "q1", mq.DequeueOptions{})
	if r == nil || r.RoutingKey != "K" {
		t.Fatalf("queue q1 delivered %s, want the redriven message of key K", describe(r))
	}
	wantAttempts(t, r, "a redriven message starts counting again", 1)
	redrive(t, a, mq.RedriveOptions{}, 0, "a second Redrive finds nothing to move")
}

func testRedriveByKeyAndByIDs(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, kmsg("K", "k1"), kmsg("L", "l1"), msg("u1"), kmsg("K", "k2"), msg("u2"))
	deadLetter(t, q, "bad")
	put(t, q, msg("pending"))
	id := map[string]int64{}
	for _, m := range append(peek(t, a, "dlq", mq.PeekOptions{}), peek(t, a, qn, mq.PeekOptions{})...) {
		id[string(m.Payload)] = m.ID
	}
	redrive(t, a, mq.RedriveOptions{RoutingKey: "K", IDs: []int64{id["u1"]}}, 0, "Redrive of key K restricted to the un-keyed u1")
	redrive(t, a, mq.RedriveOptions{RoutingKey: "K"}, 2, "Redrive of key K")
	if got := infoPayloads(peek(t, a, "dlq", mq.PeekOptions{})); !equalStrings(got, []string{"l1", "u1", "u2"}) {
		t.Fatalf("after Redrive of key K the dead-letter queue holds %q, want [l1 u1 u2]", got)
	}
	redrive(t, a, mq.RedriveOptions{IDs: []int64{id["u2"], id["l1"], id["pending"], id["k1"], 1 << 40}}, 2,
		"Redrive by ids moves the listed dead letters only (not the pending message of the origin queue, nor the redriven k1 again)")
	if got := infoPayloads(peek(t, a, "dlq", mq.PeekOptions{})); !equalStrings(got, []string{"u1"}) {
		t.Fatalf("after Redrive by ids the dead-letter queue holds %q, want [u1]", got)
	}
	if got := infoPayloads(peek(t, a, qn, mq.PeekOptions{})); !equalStrings(got, []string{"k1", "l1", "k2", "u2", "pending"}) {
		t.Fatalf("after the redrives the queue holds %q in id order, want [k1 l1 k2 u2 pending]", got)
	}
}

func testRedriveToAnotherQueueAndSkipsNonDeadLetters(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, msg("d1"), msg("d2"))
	deadLetter(t, q, "bad")
	put(t, q, mq.Message{Queue: "dlq", Payload: []byte("plain")})
	id := map[string]int64{}
	for _, m := range peek(t, a, "dlq", mq.PeekOptions{}) {
		id[string(m.Payload)] = m.ID
	}
	redrive(t, a, mq.RedriveOptions{IDs: []int64{id["plain"]}}, 0, "without To, a message that is not a dead letter has nowhere to go")
	redrive(t, a, mq.RedriveOptions{IDs: []int64{id["d1"], id["plain"]}, To: "other"}, 2, "Redrive with To moves dead letters and other messages")
	redrive(t, a, mq.RedriveOptions{}, 1, "Redrive to the origin of the last dead letter")
	if got := infoPayloads(peek(t, a, "other", mq.PeekOptions{})); !equalStrings(got, []string{"d1", "plain"}) {
		t.Fatalf("queue other holds %q, want [d1 plain]", got)
	}
	if got := infoPayloads(peek(t, a, qn, mq.PeekOptions{})); !equalStrings(got, []string{"d2"}) {
		t.Fatalf("the origin queue holds %q, want [d2]", got)
	}
	for _, m := range peek(t, a, "other", mq.PeekOptions{}) {
		if m.OriginQueue != "" || m.Attempt != 0 {
			t.Fatalf("a message redriven with To is %s, want no origin and attempt 0", infoString(m))
		}
	}
	wantEmpty(t, q, "dlq", "everything was redriven")
}

func testRedriveSkipsLockedDeadLetters(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, msg("u1"), msg("u2"))
	deadLetter(t, q, "bad")
	held := fetchFrom(t, q, "dlq", mq.DequeueOptions{LockTimeout: long})
	if held == nil {
		t.Fatal("the dead letters are not delivered from the dead-letter queue")
	}
	wantPayloads(t, held, "the oldest dead letter", "u1")
	redrive(t, a, mq.RedriveOptions{}, 1, "Redrive skips the dead letter a consumer holds")
	if m := peekID(t, a, "dlq", held.Messages[0].ID); !m.Locked {
		t.Fatalf("the held dead letter is %s, want it still locked", infoString(m))
	}
	ack(t, q, held)
	fetchPayloads(t, q, mq.DequeueOptions{}, "the unlocked dead letter was redriven", "u2")
}

func testRedriveKeepsTheKeyOrder(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, kmsg("K", "a1"), kmsg("K", "a2"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key K", "a1", "a2")
	settle(t, q, mq.Settlement{Token: b.Token, DeadLettered: 1, DeadLetterQueue: "dlq"})
	put(t, q, kmsg("K", "a3"))
	redrive(t, a, mq.RedriveOptions{RoutingKey: "K"}, 1, "Redrive of key K")
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "a redriven message keeps its id, so it comes before the later messages of its key", "a1", "a2", "a3")
	wantAttempts(t, b, "the redriven a1 starts again, a2 was released untried", 1, 1, 1)
}

func testRedriveDropsAMessageKeyTheDestinationHolds(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, keyed("", "k", "old"), keyed("", "k2", "other"))
	deadLetter(t, q, "bad")
	put(t, q, keyed("", "k", "new"))
	redrive(t, a, mq.RedriveOptions{}, 2, "Redrive of both dead letters")
	var got []string
	for _, m := range peek(t, a, qn, mq.PeekOptions{}) {
		got = append(got, string(m.Payload)+"="+m.Key)
	}
	if want := []string{"old=", "other=k2", "new=k"}; !equalStrings(got, want) {
		t.Fatalf("after Redrive the queue holds payload=key %q, want %q: a redriven message drops its message key if the destination holds it", got, want)
	}
}

func testRedriveRejectsInvalidInput(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, msg("u1"))
	deadLetter(t, q, "bad")
	for _, c := range []struct {
		rule   string
		queue  string
		opts   mq.RedriveOptions
		fields []string
	}{
		{"To equal to the dead-letter queue", "dlq", mq.RedriveOptions{To: "dlq"}, []string{"To"}},
		{"an empty queue name", "", mq.RedriveOptions{}, []string{"queue", "Queue"}},
		{"a routing key over MaxNameSize", "dlq", mq.RedriveOptions{RoutingKey: tooLong}, []string{"RoutingKey"}},
		{"To over MaxNameSize", "dlq", mq.RedriveOptions{To: tooLong}, []string{"To"}},
	} {
		n, err := call2(t, "Redrive", func() (int, error) { return a.Redrive(t.Context(), c.queue, c.opts) })
		if n != 0 {
			t.Errorf("Redrive with %s reports %d messages moved", c.rule, n)
		}
		wantInvalid(t, err, "redrive", "Redrive with "+c.rule, c.fields...)
	}
	wantStats(t, q, "dlq", mq.Stats{Ready: 1}, "rejected Redrive calls move nothing")
}

func testPurgeDeletesAllByKeyOrByIDs(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, kmsg("K", "a1"), kmsg("L", "b1"), kmsg("K", "a2"), msg("u1"), mq.Message{Queue: qn, Payload: []byte("d1"), Delay: long},
		mq.Message{Queue: "other", RoutingKey: "K", Payload: []byte("o1")})
	id := map[string]int64{}
	for _, m := range append(peek(t, a, qn, mq.PeekOptions{}), peek(t, a, "other", mq.PeekOptions{})...) {
		id[string(m.Payload)] = m.ID
	}
	purge(t, a, qn, mq.PurgeOptions{RoutingKey: "K", IDs: []int64{id["u1"]}}, 0, "Purge of key K restricted to the un-keyed u1")
	purge(t, a, qn, mq.PurgeOptions{RoutingKey: "K"}, 2, "Purge of key K")
	purge(t, a, qn, mq.PurgeOptions{IDs: []int64{id["u1"], id["o1"], id["a1"], 1 << 40}}, 1,
		"Purge by ids deletes the listed messages of the queue only (not o1 of another queue, nor the purged a1 again)")
	if got := infoPayloads(peek(t, a, qn, mq.PeekOptions{})); !equalStrings(got, []string{"b1", "d1"}) {
		t.Fatalf("after the purges the queue holds %q, want [b1 d1]", got)
	}
	purge(t, a, qn, mq.PurgeOptions{}, 2, "Purge of every message, delayed ones included")
	wantEmpty(t, q, qn, "the queue was purged")
	wantStats(t, q, "other", mq.Stats{Ready: 1}, "Purge must not touch another queue")
	purge(t, a, "unknown", mq.PurgeOptions{}, 0, "Purge of a queue without messages")
	n, err := call2(t, "Purge", func() (int, error) { return a.Purge(t.Context(), "", mq.PurgeOptions{}) })
	if n != 0 {
		t.Errorf("Purge of an empty queue name reports %d messages", n)
	}
	wantInvalid(t, err, "purge", "Purge with an empty queue name", "queue", "Queue")
}

func testPurgeOfALockedMessageLosesTheLock(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	put(t, q, kmsg("K", "a1"), kmsg("K", "a2"), kmsg("K", "a3"), msg("u1"), kmsg("L", "l1"))
	k := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key K", "a1", "a2", "a3")
	u := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "u1", "u1")
	l := fetchPayloads(t, q, mq.DequeueOptions{LockTimeout: long}, "key L", "l1")
	purge(t, a, qn, mq.PurgeOptions{IDs: []int64{k.Messages[1].ID, u.Messages[0].ID}}, 2, "Purge of two locked messages")
	wantLockLost(t, q.Ack(t.Context(), k.Token), "ack", "the holder's Ack after Purge deleted one of its messages")
	wantLockLost(t, q.Ack(t.Context(), u.Token), "ack", "the holder's Ack after Purge deleted its message")
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "the invalidated batch's other messages are eligible again", "a1", "a3")
	wantAttempts(t, b, "the invalidated fetch counted", 2, 2)

	purge(t, a, qn, mq.PurgeOptions{RoutingKey: "L"}, 1, "Purge of the locked key L")
	_, err := q.Renew(t.Context(), l.Token, long)
	wantLockLost(t, err, "renew", "the holder's Renew after Purge deleted its key's messages")
	put(t, q, kmsg("L", "l2"))
	fetchPayloads(t, q, mq.DequeueOptions{}, "the purge ended key L's lock", "l2")
	if slices.ContainsFunc(peek(t, a, qn, mq.PeekOptions{}), func(m mq.MessageInfo) bool { return string(m.Payload) == "l1" }) {
		t.Fatal("the purged l1 is still stored")
	}
}

// Queues lists the queues that hold messages, in name order, each with exactly the
// Stats that Stats gives for it; a queue emptied by a purge is no longer listed.
func testQueuesListsEveryQueueWithItsStats(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	list := func(rule string, want ...string) []mq.QueueStats {
		t.Helper()
		got, err := a.Queues(t.Context())
		if err != nil {
			t.Fatalf("Queues failed: %v", err)
		}
		var names []string
		for _, qs := range got {
			names = append(names, qs.Queue)
			if st, err := q.Stats(t.Context(), qs.Queue); err != nil || st != qs.Stats {
				t.Fatalf("Queues lists %q with %+v; Stats says %+v, %v", qs.Queue, qs.Stats, st, err)
			}
		}
		if !equalStrings(names, want) {
			t.Fatalf("%s: Queues lists %q, want %q", rule, names, want)
		}
		return got
	}
	list("an empty backend")
	put(t, q, mq.Message{Queue: "b", Payload: []byte("1")}, mq.Message{Queue: "b", Payload: []byte("2")},
		mq.Message{Queue: "a", Payload: []byte("later"), Delay: long}, mq.Message{Queue: "c", RoutingKey: "K", Payload: []byte("x")})
	if b := fetchFrom(t, q, "c", mq.DequeueOptions{LockTimeout: long}); b == nil {
		t.Fatal("c's message was not delivered")
	}
	got := list("three queues", "a", "b", "c")
	if got[0].Delayed != 1 || got[1].Ready != 2 || got[2].Locked != 1 || got[2].MaxAttempt != 1 {
		t.Fatalf("Queues = %+v; want a with 1 delayed, b with 2 ready, c with 1 locked after 1 attempt", got)
	}
	purge(t, a, "b", mq.PurgeOptions{}, 2, "Purge of b")
	list("b was purged", "a", "c")
}
