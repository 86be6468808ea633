package conformance

import (
	"testing"

	"github.com/duroq/duroq/mq"
)

// keyAttrCases: routing-key attributes and DequeueOptions.KeyAttr (capability filtering).
var keyAttrCases = []mqCase{
	{"KeyAttrKeysWithoutAttributeAreAlwaysEligible", testKeyAttrKeysWithoutAttributeAreAlwaysEligible},
	{"KeyAttrRangeBoundsAreInclusive", testKeyAttrRangeBoundsAreInclusive},
	{"KeyAttrEmptyFilterAcceptsNoKeyedMessage", testKeyAttrEmptyFilterAcceptsNoKeyedMessage},
	{"KeyAttrSkippedKeyIsNotLocked", testKeyAttrSkippedKeyIsNotLocked},
	{"KeyAttrSkipsToYoungerCompatibleKey", testKeyAttrSkipsToYoungerCompatibleKey},
	{"KeyAttrCanBeOverwrittenAndCleared", testKeyAttrCanBeOverwrittenAndCleared},
	{"KeyAttrOutlivesMessages", testKeyAttrOutlivesMessages},
	{"KeyAttrIsForgottenByPurgeKey", testKeyAttrIsForgottenByPurgeKey},
	{"KeyAttrIsScopedToItsQueue", testKeyAttrIsScopedToItsQueue},
}

func i64(v int64) *int64 { return &v }

// setAttr sets the attribute of key in qn and fails on error.
func setAttr(t *testing.T, q mq.MessageQueue, key string, v *int64) {
	t.Helper()
	if err := q.SetKeyAttr(t.Context(), qn, key, v); err != nil {
		t.Fatalf("SetKeyAttr(%q) failed: %v", key, err)
	}
}

// attrs returns options whose KeyAttr filter has the given ranges (pairs of min, max).
func attrs(bounds ...int64) mq.DequeueOptions {
	f := &mq.AttrFilter{Ranges: []mq.AttrRange{}}
	for i := 0; i+1 < len(bounds); i += 2 {
		f.Ranges = append(f.Ranges, mq.AttrRange{Min: bounds[i], Max: bounds[i+1]})
	}
	return mq.DequeueOptions{KeyAttr: f}
}

// wantKey fails unless b is the batch of key.
func wantKey(t *testing.T, b *mq.Batch, key, rule string) {
	t.Helper()
	if b.RoutingKey != key {
		t.Fatalf("%s: got %s, want the batch of key %q", rule, describe(b), key)
	}
}

func testKeyAttrKeysWithoutAttributeAreAlwaysEligible(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("with", "w1"), kmsg("without", "n1"), msg("u1"))
	setAttr(t, q, "with", i64(5))
	wantKey(t, mustFetch(t, q, attrs(100, 200), "key without attribute"), "without",
		"a key without attribute passes every filter, while a key whose attribute is outside the ranges is skipped")
	fetchPayloads(t, q, attrs(100, 200), "un-keyed messages are not affected by KeyAttr", "u1")
	mustFetchNothing(t, q, attrs(100, 200), "the key with attribute 5 is outside [100,200]")
	wantKey(t, mustFetch(t, q, mq.DequeueOptions{}, "no filter"), "with", "a nil KeyAttr accepts every key")
}

func testKeyAttrRangeBoundsAreInclusive(t *testing.T, e env) {
	q := e.open(t)
	for key, v := range map[string]int64{"k9": 9, "k10": 10, "k20": 20, "k21": 21, "k0": 0, "kneg": -5} {
		put(t, q, kmsg(key, key))
		setAttr(t, q, key, i64(v))
	}
	got := map[string]bool{}
	for {
		b := fetch(t, q, attrs(10, 20))
		if b == nil {
			break
		}
		got[b.RoutingKey] = true
		ack(t, q, b)
	}
	if len(got) != 2 || !got["k10"] || !got["k20"] {
		t.Fatalf("filter [10,20] fetched keys %v, want exactly k10 and k20: both bounds are inclusive", got)
	}
	got = map[string]bool{}
	for {
		b := fetch(t, q, attrs(-10, -1, 21, 30, 9, 9))
		if b == nil {
			break
		}
		got[b.RoutingKey] = true
	}
	if len(got) != 3 || !got["kneg"] || !got["k21"] || !got["k9"] {
		t.Fatalf("filter [-10,-1] [21,30] [9,9] fetched keys %v, want kneg, k21 and k9: a key passes if it is inside any range", got)
	}
	wantKey(t, mustFetch(t, q, mq.DequeueOptions{}, "k0"), "k0", "attribute 0 is an attribute, outside every range above")
}

func testKeyAttrEmptyFilterAcceptsNoKeyedMessage(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"), kmsg("B", "b1"), kmsg("C", "c1"), msg("u1"))
	setAttr(t, q, "A", i64(1))
	setAttr(t, q, "B", i64(0))
	empty := mq.DequeueOptions{KeyAttr: &mq.AttrFilter{}}
	fetchPayloads(t, q, empty, "a filter with no ranges accepts no keyed message, but un-keyed messages still flow", "u1")
	mustFetchNothing(t, q, empty, "a filter with no ranges accepts no keyed message, with or without an attribute")
	wantStats(t, q, qn, mq.Stats{Ready: 3, Locked: 1}, "skipped keys are not locked")
	wantKey(t, mustFetch(t, q, mq.DequeueOptions{}, "A"), "A", "without a filter A is eligible")
	wantKey(t, mustFetch(t, q, mq.DequeueOptions{}, "B"), "B", "without a filter B is eligible")
	wantKey(t, mustFetch(t, q, mq.DequeueOptions{}, "C"), "C", "without a filter C is eligible")
}

func testKeyAttrSkippedKeyIsNotLocked(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"), kmsg("A", "a2"))
	setAttr(t, q, "A", i64(50))
	mustFetchNothing(t, q, attrs(0, 10), "key A's attribute 50 is outside [0,10]")
	b := fetchPayloads(t, q, attrs(50, 50), "a key skipped by an incompatible filter must not be locked: a compatible fetch gets it at once", "a1", "a2")
	wantAttempts(t, b, "the skipped fetch must not count as an attempt", 1, 1)
}

func testKeyAttrSkipsToYoungerCompatibleKey(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("old", "o1"), kmsg("young", "y1"))
	setAttr(t, q, "old", i64(50))
	setAttr(t, q, "young", i64(5))
	wantKey(t, mustFetch(t, q, attrs(0, 10), "young"), "young", "the filter skips the older incompatible key and takes the younger compatible one")
	wantKey(t, mustFetch(t, q, attrs(40, 60), "old"), "old", "the older key is eligible for its own range")
}

func testKeyAttrCanBeOverwrittenAndCleared(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"))
	setAttr(t, q, "A", i64(5))
	setAttr(t, q, "A", i64(50))
	mustFetchNothing(t, q, attrs(0, 10), "SetKeyAttr overwrote 5 with 50")
	b := mustFetch(t, q, attrs(50, 50), "the new attribute")
	abandon(t, q, b, mq.AbandonOptions{})
	setAttr(t, q, "A", nil)
	wantKey(t, mustFetch(t, q, attrs(100, 100), "A"), "A", "SetKeyAttr(nil) clears the attribute: a key without attribute passes every filter")
}

func testKeyAttrOutlivesMessages(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"))
	setAttr(t, q, "A", i64(50))
	ack(t, q, mustFetch(t, q, attrs(50, 50), "A"))
	put(t, q, kmsg("A", "a2"))
	mustFetchNothing(t, q, attrs(0, 10), "the attribute outlives the key's messages and applies to its later messages")
	fetchPayloads(t, q, attrs(50, 50), "the key's later message under its old attribute", "a2")

	setAttr(t, q, "B", i64(7))
	put(t, q, kmsg("B", "b1"))
	mustFetchNothing(t, q, attrs(0, 5), "an attribute set before the key has messages applies to them")
	fetchPayloads(t, q, attrs(7, 7), "key B under its attribute", "b1")
}

func testKeyAttrIsForgottenByPurgeKey(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"))
	setAttr(t, q, "A", i64(50))
	if n, err := q.PurgeKey(t.Context(), qn, "A"); err != nil || n != 1 {
		t.Fatalf("PurgeKey(A) = %d, %v; want 1, nil", n, err)
	}
	put(t, q, kmsg("A", "a2"))
	fetchPayloads(t, q, attrs(0, 10), "PurgeKey forgets the key's attribute", "a2")
}

func testKeyAttrIsScopedToItsQueue(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"), mq.Message{Queue: "other", RoutingKey: "A", Payload: []byte("o1")})
	setAttr(t, q, "A", i64(50))
	b := fetchFrom(t, q, "other", attrs(0, 10))
	if b == nil {
		t.Fatal("the attribute of key A in one queue must not filter key A of another queue")
	}
	mustFetchNothing(t, q, attrs(0, 10), "key A of this queue has attribute 50")
}
