package conformance

import (
	"testing"

	"github.com/duroq/duroq/mq"
)

// tagCases: the five tag filters (duroxide's tag-filtering scenarios at queue level).
var tagCases = []mqCase{
	{"TagDefaultOnlyFetchesUntagged", testTagDefaultOnlyFetchesUntagged},
	{"TagOnlyFetchesMatching", testTagOnlyFetchesMatching},
	{"TagDefaultAndFetchesUntaggedAndMatching", testTagDefaultAndFetchesUntaggedAndMatching},
	{"TagNoTagsFetchesNothing", testTagNoTagsFetchesNothing},
	{"TagMultiTagFilter", testTagMultiTagFilter},
	{"TagAnyAndZeroFilterFetchEverything", testTagAnyAndZeroFilterFetchEverything},
	{"TagSurvivesAbandonAndRefetch", testTagSurvivesAbandonAndRefetch},
	{"TagLockedMessagesAreInvisibleToEveryFilter", testTagLockedMessagesAreInvisibleToEveryFilter},
	{"TagFilterAppliesToEachMessageOfAKey", testTagFilterAppliesToEachMessageOfAKey},
	{"TagEmptyTagListsAcceptOnlyWhatTheModeAllows", testTagEmptyTagListsAcceptOnlyWhatTheModeAllows},
	{"TagPreservedThroughAckFollowUp", testTagPreservedThroughAckFollowUp},
}

// tmsg is an un-keyed message of qn with a tag.
func tmsg(tag, payload string) mq.Message {
	return mq.Message{Queue: qn, Tag: tag, Payload: []byte(payload)}
}

func tags(f mq.TagFilter) mq.DequeueOptions { return mq.DequeueOptions{Tags: f} }

func testTagDefaultOnlyFetchesUntagged(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, tmsg("", "1"), tmsg("gpu", "2"), tmsg("", "3"))
	fetchPayloads(t, q, tags(mq.DefaultOnly()), "DefaultOnly fetches untagged messages in FIFO order", "1")
	fetchPayloads(t, q, tags(mq.DefaultOnly()), "DefaultOnly fetches untagged messages in FIFO order", "3")
	mustFetchNothing(t, q, tags(mq.DefaultOnly()), "DefaultOnly never fetches a tagged message")
	fetchPayloads(t, q, tags(mq.AnyTag()), "the tagged message is still there for another filter", "2")
}

func testTagOnlyFetchesMatching(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, tmsg("", "1"), tmsg("gpu", "2"), tmsg("cpu", "3"), tmsg("gpu", "4"))
	for _, p := range []string{"2", "4"} {
		b := fetchPayloads(t, q, tags(mq.Tags("gpu")), "Tags(gpu) fetches gpu messages in FIFO order", p)
		if b.Messages[0].Tag != "gpu" {
			t.Fatalf("a gpu message is delivered with tag %q", b.Messages[0].Tag)
		}
	}
	mustFetchNothing(t, q, tags(mq.Tags("gpu")), "Tags(gpu) never fetches untagged or cpu messages")
}

func testTagDefaultAndFetchesUntaggedAndMatching(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, tmsg("", "1"), tmsg("gpu", "2"), tmsg("cpu", "3"))
	fetchPayloads(t, q, tags(mq.DefaultAnd("gpu")), "DefaultAnd(gpu) fetches untagged and gpu messages in FIFO order", "1")
	fetchPayloads(t, q, tags(mq.DefaultAnd("gpu")), "DefaultAnd(gpu) fetches untagged and gpu messages in FIFO order", "2")
	mustFetchNothing(t, q, tags(mq.DefaultAnd("gpu")), "DefaultAnd(gpu) never fetches a cpu message")
	fetchPayloads(t, q, tags(mq.Tags("cpu")), "the cpu message is still there", "3")
}

func testTagNoTagsFetchesNothing(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, tmsg("", "1"), tmsg("gpu", "2"), kmsg("A", "3"))
	mustFetchNothing(t, q, tags(mq.NoTags()), "NoTags accepts nothing, tagged or not")
	wantStats(t, q, qn, mq.Stats{Ready: 3}, "a NoTags fetch locks nothing")
}

func testTagMultiTagFilter(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, tmsg("gpu", "1"), tmsg("tpu", "2"), tmsg("cpu", "3"), tmsg("", "4"))
	fetchPayloads(t, q, tags(mq.Tags("gpu", "tpu")), "Tags(gpu,tpu) fetches either tag in FIFO order", "1")
	fetchPayloads(t, q, tags(mq.Tags("gpu", "tpu")), "Tags(gpu,tpu) fetches either tag in FIFO order", "2")
	mustFetchNothing(t, q, tags(mq.Tags("gpu", "tpu")), "Tags(gpu,tpu) never fetches cpu or untagged messages")
}

func testTagAnyAndZeroFilterFetchEverything(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, tmsg("", "1"), tmsg("gpu", "2"), tmsg("cpu", "3"), tmsg("", "4"))
	fetchPayloads(t, q, mq.DequeueOptions{}, "the zero TagFilter accepts every message", "1")
	fetchPayloads(t, q, tags(mq.AnyTag()), "AnyTag accepts every message", "2")
	fetchPayloads(t, q, mq.DequeueOptions{}, "the zero TagFilter accepts every message", "3")
	fetchPayloads(t, q, tags(mq.AnyTag()), "AnyTag accepts every message", "4")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "all messages are locked")
}

func testTagSurvivesAbandonAndRefetch(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, tmsg("gpu", "1"), tmsg("", "2"))
	b := fetchPayloads(t, q, tags(mq.Tags("gpu")), "the gpu message", "1")
	abandon(t, q, b, mq.AbandonOptions{})
	r := fetchPayloads(t, q, tags(mq.Tags("gpu")), "an abandoned gpu message is refetched by Tags(gpu)", "1")
	d := r.Messages[0]
	if d.ID != b.Messages[0].ID || d.Tag != "gpu" || d.Attempt != 2 || r.Token == b.Token {
		t.Fatalf("refetch after Abandon gave id %d tag %q attempt %d token %q; want id %d, tag \"gpu\", attempt 2, a new token",
			d.ID, d.Tag, d.Attempt, r.Token, b.Messages[0].ID)
	}
	fetchPayloads(t, q, tags(mq.DefaultOnly()), "DefaultOnly sees only the untagged message", "2")
	mustFetchNothing(t, q, tags(mq.DefaultOnly()), "nothing else is untagged")
}

func testTagLockedMessagesAreInvisibleToEveryFilter(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, tmsg("", "1"), tmsg("gpu", "2"), tmsg("cpu", "3"), tmsg("fpga", "4"), tmsg("gpu", "5"))
	fetchPayloads(t, q, tags(mq.DefaultOnly()), "DefaultOnly", "1")
	mustFetchNothing(t, q, tags(mq.DefaultOnly()), "the only untagged message is locked")
	fetchPayloads(t, q, tags(mq.Tags("gpu", "cpu")), "Tags(gpu,cpu) in FIFO order", "2")
	fetchPayloads(t, q, tags(mq.Tags("gpu", "cpu")), "Tags(gpu,cpu) in FIFO order", "3")
	fetchPayloads(t, q, tags(mq.Tags("cpu", "fpga")), "Tags(cpu,fpga) skips the locked cpu message", "4")
	mustFetchNothing(t, q, tags(mq.Tags("cpu", "fpga")), "every cpu and fpga message is locked")
	fetchPayloads(t, q, tags(mq.AnyTag()), "AnyTag gets the only unlocked message", "5")
	mustFetchNothing(t, q, tags(mq.AnyTag()), "locked messages are invisible to every filter")
}

func testTagFilterAppliesToEachMessageOfAKey(t *testing.T, e env) {
	q := e.open(t)
	put(t, q,
		mq.Message{Queue: qn, RoutingKey: "A", Payload: []byte("a1")},
		mq.Message{Queue: qn, RoutingKey: "A", Payload: []byte("a2"), Tag: "gpu"},
		mq.Message{Queue: qn, RoutingKey: "A", Payload: []byte("a3")},
	)
	b := fetchPayloads(t, q, tags(mq.DefaultOnly()),
		"a batch holds only the key's messages that pass the tag filter", "a1", "a3")
	mustFetchNothing(t, q, tags(mq.Tags("gpu")), "the gpu message's key A is locked by the DefaultOnly batch")
	ack(t, q, b)
	g := fetchPayloads(t, q, tags(mq.Tags("gpu")), "the gpu message of key A survives the ack of the untagged batch", "a2")
	if g.RoutingKey != "A" {
		t.Fatalf("the batch reports RoutingKey %q, want %q", g.RoutingKey, "A")
	}
}

func testTagEmptyTagListsAcceptOnlyWhatTheModeAllows(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, tmsg("gpu", "1"), tmsg("", "2"))
	mustFetchNothing(t, q, tags(mq.Tags()), "Tags() with no tags accepts nothing")
	fetchPayloads(t, q, tags(mq.DefaultAnd()), "DefaultAnd() with no tags accepts untagged messages", "2")
	mustFetchNothing(t, q, tags(mq.DefaultAnd()), "DefaultAnd() with no tags accepts no tagged message")
}

func testTagPreservedThroughAckFollowUp(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("start"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "start", "start")
	ack(t, q, b, tmsg("gpu", "GpuWork"), tmsg("", "CpuWork"))
	fetchPayloads(t, q, tags(mq.DefaultOnly()), "DefaultOnly gets the untagged follow-up", "CpuWork")
	mustFetchNothing(t, q, tags(mq.DefaultOnly()), "the other follow-up is tagged gpu")
	g := fetchPayloads(t, q, tags(mq.Tags("gpu")), "Tags(gpu) gets the gpu follow-up", "GpuWork")
	if g.Messages[0].Tag != "gpu" {
		t.Fatalf("the follow-up enqueued by Ack lost its tag: got %q, want \"gpu\"", g.Messages[0].Tag)
	}
}
