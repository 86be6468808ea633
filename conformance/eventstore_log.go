package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/duroq/duroq/eventstore"
)

var esLogCases = []esCase{
	{"Log/AppendThenReadInOrder", esAppendThenReadInOrder},
	{"Log/ReadOfUnknownIsEmpty", esReadOfUnknownIsEmpty},
	{"Log/DuplicateSeqConflictsAndWritesNothing", esDuplicateSeqConflicts},
	{"Log/GapsAllowedAndReadsSorted", esGapsAllowedAndReadsSorted},
	{"Log/PartitionsAndStreamsAreIsolated", esPartitionsAndStreamsAreIsolated},
	{"Log/CurrentPartitionIsTheHighest", esCurrentPartitionIsTheHighest},
	{"Log/EmptyAppendWritesNothing", esEmptyAppendWritesNothing},
	{"Log/LargeEventsUpToTheLimit", esLargeEvents},
	{"Log/DataIsCopied", esDataIsCopied},
	{"Log/ConcurrentAppendersOneWinnerPerSeq", esConcurrentAppenders},
	{"Log/ConcurrentStreams", esConcurrentStreams},
	{"Log/CorruptEventReportedAndAppendStillWorks", esCorruptEvent},
}

var esInputCases = []esCase{
	{"Input/RejectedBeforeWriting", esBadInput},
	{"Input/OversizedRejected", esOversizedInput},
	{"Input/ClosedStore", esClosedStore},
	{"Input/CanceledContext", esCanceledContext},
}

func esAppendThenReadInOrder(x *esT) {
	x.append("s", 1, 1, 2, 3)
	t1 := x.clock.Now()
	x.clock.Advance(time.Second)
	x.append("s", 1, 4, 5)
	t2 := x.clock.Now()
	events := x.read("s", 1)
	if got := esSeqs(events); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		x.Fatalf("Read = seqs %v, want [1 2 3 4 5] (events come back in sequence order)", got)
	}
	for _, e := range events {
		want := esEvents("s", 1, e.Seq)[0]
		if e.Type != want.Type || !bytes.Equal(e.Data, want.Data) {
			x.Fatalf("event %d = {%q %q}, want {%q %q} (events are stored verbatim)", e.Seq, e.Type, e.Data, want.Type, want.Data)
		}
		at := t1
		if e.Seq > 3 {
			at = t2
		}
		if !e.CreatedAt.Equal(at) {
			x.Fatalf("event %d CreatedAt = %v, want %v (the store's clock at Append)", e.Seq, e.CreatedAt, at)
		}
	}
	// An event with no data reads back as an empty, non-nil slice.
	x.ok(x.s.Append(x.Context(), "s", 1, []eventstore.Event{{Seq: 6}}), "Append(empty event)")
	events = x.read("s", 1)
	if last := events[len(events)-1]; last.Seq != 6 || last.Data == nil || len(last.Data) != 0 || last.Type != "" {
		x.Fatalf("empty event read back as %+v, want Seq 6, Type \"\", Data []byte{}", last)
	}
}

func esReadOfUnknownIsEmpty(x *esT) {
	if events := x.read("nobody", 1); len(events) != 0 {
		x.Fatalf("Read of an unknown stream = %d events, want none", len(events))
	}
	p, events, err := x.s.ReadLatest(x.Context(), "nobody")
	x.ok(err, "ReadLatest(unknown)")
	if p != 0 || len(events) != 0 {
		x.Fatalf("ReadLatest(unknown) = (%d, %d events), want (0, none)", p, len(events))
	}
	_, err = x.s.LatestPartition(x.Context(), "nobody")
	x.wantErr(err, eventstore.ErrNotFound, "LatestPartition(unknown)", "an unknown stream is not found")
	if nf, ok := errors.AsType[*eventstore.NotFoundError](err); !ok || nf.Stream != "nobody" {
		x.Fatalf("LatestPartition(unknown) error %v is not a *NotFoundError naming the stream", err)
	}
	if parts := x.partitions("nobody"); len(parts) != 0 {
		x.Fatalf("Partitions(unknown) = %v, want none", parts)
	}
	x.append("s", 1, 1)
	if events := x.read("s", 7); len(events) != 0 {
		x.Fatalf("Read of an unknown partition = %d events, want none", len(events))
	}
}

func esDuplicateSeqConflicts(x *esT) {
	x.append("s", 1, 1, 2, 3, 4, 5, 10)
	x.clock.Advance(time.Second)
	err := x.s.Append(x.Context(), "s", 1, esEvents("s", 1, 8, 9, 10, 11))
	x.wantErr(err, eventstore.ErrConflict, "Append(8 9 10 11) over 10", "a stored sequence number conflicts")
	ce, ok := errors.AsType[*eventstore.ConflictError](err)
	if !ok {
		x.Fatalf("conflict error %v is not a *ConflictError", err)
	}
	if ce.Stream != "s" || ce.Partition != 1 || ce.Seq != 10 {
		x.Fatalf("ConflictError = %+v, want stream s, partition 1, seq 10", *ce)
	}
	if msg := err.Error(); !strings.Contains(msg, `"s"`) || !strings.Contains(msg, "partition 1") || !strings.Contains(msg, "10") {
		x.Fatalf("conflict message %q should name the stream, the partition and the number", msg)
	}
	x.wantSeqs("s", 1, "a conflicting call writes none of its events", 1, 2, 3, 4, 5, 10)
	if p := x.partitions("s"); p[0].Events != 6 {
		x.Fatalf("partition event count = %d after a failed append, want 6", p[0].Events)
	}
	if info := x.info("s"); !info.UpdatedAt.Equal(esEpoch) {
		x.Fatalf("UpdatedAt = %v after a failed append, want %v (nothing written)", info.UpdatedAt, esEpoch)
	}
	err = x.s.Append(x.Context(), "s", 1, esEvents("s", 1, 1))
	x.wantErr(err, eventstore.ErrConflict, "Append(1) again", "rewriting event 1 is a conflict")
	// The same numbers in another partition or stream are no conflict.
	x.append("s", 2, 1, 2)
	x.append("t", 1, 1, 2)
}

func esGapsAllowedAndReadsSorted(x *esT) {
	// The caller owns numbering: gaps are accepted (the runtime's poison path appends
	// a sentinel far ahead), and calls may arrive out of order.
	x.append("s", 1, 1, 2, 5)
	x.append("s", 1, 99999)
	x.append("s", 1, 3, 4)
	x.wantSeqs("s", 1, "reads are sorted by sequence number", 1, 2, 3, 4, 5, 99999)
}

func esPartitionsAndStreamsAreIsolated(x *esT) {
	x.append("a", 1, 1, 2, 3)
	x.append("a", 2, 1, 2)
	x.append("b", 1, 1, 2, 3, 4)
	x.append("a:b", 1, 1)
	x.wantSeqs("a", 1, "partition 1 of a", 1, 2, 3)
	x.wantSeqs("a", 2, "partition 2 of a", 1, 2)
	x.wantSeqs("b", 1, "stream b", 1, 2, 3, 4)
	x.wantSeqs("a:b", 1, "stream a:b", 1)
	p, events, err := x.s.ReadLatest(x.Context(), "a")
	x.ok(err, "ReadLatest(a)")
	if p != 2 || !slices.Equal(esSeqs(events), []int64{1, 2}) {
		x.Fatalf("ReadLatest(a) = (%d, %v), want (2, [1 2])", p, esSeqs(events))
	}
	parts := x.partitions("a")
	if len(parts) != 2 || parts[0].Partition != 1 || parts[1].Partition != 2 {
		x.Fatalf("Partitions(a) = %+v, want partitions 1 and 2 in order", parts)
	}
	size := func(stream string, p int64, seqs ...int64) (n int64) {
		for _, e := range esEvents(stream, p, seqs...) {
			n += int64(len(e.Data))
		}
		return n
	}
	if parts[0].Events != 3 || parts[0].Bytes != size("a", 1, 1, 2, 3) ||
		parts[1].Events != 2 || parts[1].Bytes != size("a", 2, 1, 2) {
		x.Fatalf("Partitions(a) counters = %+v, want 3 events/%d bytes and 2 events/%d bytes",
			parts, size("a", 1, 1, 2, 3), size("a", 2, 1, 2))
	}
	for _, p := range parts {
		if p.Status != eventstore.StatusRunning || !p.StartedAt.Equal(esEpoch) || !p.CompletedAt.IsZero() {
			x.Fatalf("new partition %+v, want Running, started at the clock, not completed", p)
		}
	}
}

func esCurrentPartitionIsTheHighest(x *esT) {
	x.append("s", 3, 1)
	x.append("s", 1, 1)
	p, err := x.s.LatestPartition(x.Context(), "s")
	x.ok(err, "LatestPartition")
	if p != 3 {
		x.Fatalf("LatestPartition = %d after appending to 3 then 1, want 3", p)
	}
	x.append("s", 4, 1)
	if p, _ := x.s.LatestPartition(x.Context(), "s"); p != 4 {
		x.Fatalf("LatestPartition = %d after appending to 4, want 4", p)
	}
}

func esEmptyAppendWritesNothing(x *esT) {
	x.ok(x.s.Append(x.Context(), "s", 1, nil), "Append(no events)")
	if x.exists("s") {
		x.Fatal("Append of no events created the stream; it must write nothing")
	}
}

func esLargeEvents(x *esT) {
	big := bytes.Repeat([]byte("0123456789abcdef"), eventstore.MaxEventSize/16)
	big[len(big)-1] = 'Z'
	x.ok(x.s.Append(x.Context(), "s", 1, []eventstore.Event{{Seq: 1, Type: strings.Repeat("t", eventstore.MaxTypeSize), Data: big}}),
		"Append(event of MaxEventSize bytes)")
	events := x.read("s", 1)
	if len(events) != 1 || !bytes.Equal(events[0].Data, big) || len(events[0].Type) != eventstore.MaxTypeSize {
		x.Fatal("an event of exactly MaxEventSize bytes (and a type of MaxTypeSize) must round-trip")
	}
	tooBig := make([]byte, eventstore.MaxEventSize+1)
	err := x.s.Append(x.Context(), "s", 1, []eventstore.Event{{Seq: 2, Data: []byte("small")}, {Seq: 3, Data: tooBig}})
	x.wantErr(err, eventstore.ErrTooLarge, "Append(MaxEventSize+1 bytes)", "events beyond MaxEventSize are refused")
	if !strings.Contains(err.Error(), fmt.Sprint(eventstore.MaxEventSize)) {
		x.Fatalf("error %q should state the limit", err)
	}
	err = x.s.Append(x.Context(), "s", 1, []eventstore.Event{{Seq: 2, Type: strings.Repeat("t", eventstore.MaxTypeSize+1)}})
	x.wantErr(err, eventstore.ErrTooLarge, "Append(type of MaxTypeSize+1 bytes)", "types beyond MaxTypeSize are refused")
	if events := x.read("s", 1); len(events) != 1 {
		x.Fatalf("partition holds %d events after refused appends, want 1 (a refused call writes nothing)", len(events))
	}
}

func esDataIsCopied(x *esT) {
	data := []byte("original")
	x.ok(x.s.Append(x.Context(), "s", 1, []eventstore.Event{{Seq: 1, Data: data}}), "Append")
	copy(data, "CHANGED!")
	events := x.read("s", 1)
	if string(events[0].Data) != "original" {
		x.Fatalf("stored data changed with the caller's slice: %q", events[0].Data)
	}
	copy(events[0].Data, "CHANGED!")
	if events := x.read("s", 1); string(events[0].Data) != "original" {
		x.Fatalf("stored data changed with a returned slice: %q", events[0].Data)
	}
}

func esConcurrentAppenders(x *esT) {
	const writers, seqs = 6, 15
	var (
		mu      sync.Mutex
		winners = make(map[int64][]int)
		wg      sync.WaitGroup
		errs    = make(chan error, writers*seqs)
	)
	for w := range writers {
		wg.Go(func() {
			for seq := int64(1); seq <= seqs; seq++ {
				err := x.s.Append(context.Background(), "s", 1,
					[]eventstore.Event{{Seq: seq, Data: fmt.Appendf(nil, "writer %d", w)}})
				switch {
				case err == nil:
					mu.Lock()
					winners[seq] = append(winners[seq], w)
					mu.Unlock()
				case !errors.Is(err, eventstore.ErrConflict):
					errs <- fmt.Errorf("writer %d seq %d: %w", w, seq, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		x.Fatalf("concurrent Append failed with something other than ErrConflict: %v", err)
	}
	events := x.read("s", 1)
	if len(events) != seqs {
		x.Fatalf("partition holds %d events, want %d", len(events), seqs)
	}
	for _, e := range events {
		w := winners[e.Seq]
		if len(w) != 1 {
			x.Fatalf("seq %d was accepted for writers %v; exactly one appender must win each number", e.Seq, w)
		}
		if want := fmt.Sprintf("writer %d", w[0]); string(e.Data) != want {
			x.Fatalf("seq %d holds %q, but %q won it", e.Seq, e.Data, want)
		}
	}
	if p := x.partitions("s"); p[0].Events != seqs {
		x.Fatalf("partition event count = %d, want %d (only winners count)", p[0].Events, seqs)
	}
}

func esConcurrentStreams(x *esT) {
	const streams, seqs = 6, 15
	var wg sync.WaitGroup
	errs := make(chan error, streams*seqs)
	for i := range streams {
		stream := fmt.Sprintf("s%d", i)
		wg.Go(func() {
			for seq := int64(1); seq <= seqs; seq++ {
				if err := x.s.Append(context.Background(), stream, 1, esEvents(stream, 1, seq)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		x.Fatalf("Append to a stream of its own failed: %v", err)
	}
	for i := range streams {
		x.wantSeqs(fmt.Sprintf("s%d", i), 1, "appenders of different streams do not interfere", esRange(1, seqs)...)
	}
}

func esCorruptEvent(x *esT) {
	if x.f.Corrupt == nil {
		x.Skip("EventStoreFactory.Corrupt is nil")
	}
	x.append("s", 1, 1, 2, 3)
	x.append("other", 1, 1, 2)
	x.f.Corrupt(x.T, x.s, "s", 1, 2)

	_, err := x.s.Read(x.Context(), "s", 1)
	x.wantErr(err, eventstore.ErrCorrupt, "Read of a partition with a damaged event", "a bad row is reported, never skipped")
	ce, ok := errors.AsType[*eventstore.CorruptError](err)
	if !ok || ce.Stream != "s" || ce.Partition != 1 || ce.Seq != 2 {
		x.Fatalf("Read error %v is not a *CorruptError naming stream s, partition 1, seq 2", err)
	}
	_, _, err = x.s.ReadLatest(x.Context(), "s")
	x.wantErr(err, eventstore.ErrCorrupt, "ReadLatest", "a bad row is reported by every reader")

	// Append never reads old rows, so the partition still takes events; a damaged
	// row still holds its sequence number.
	x.append("s", 1, 4)
	err = x.s.Append(x.Context(), "s", 1, esEvents("s", 1, 2))
	x.wantErr(err, eventstore.ErrConflict, "Append(2) over the damaged event", "the damaged row keeps its number")
	failed := eventstore.StatusFailed
	x.update("s", eventstore.StreamUpdate{Partition: 1, Status: &failed, Output: esPtr("history could not be decoded")})
	if info := x.info("s"); info.Status != eventstore.StatusFailed {
		x.Fatalf("status = %q after Update, want Failed", info.Status)
	}
	if st := x.stats("s"); st.Events != 4 {
		x.Fatalf("Stats.Events = %d, want 4 (stats do not decode events)", st.Events)
	}
	x.wantSeqs("other", 1, "other streams are unaffected", 1, 2)
	x.append("s", 2, 1)
	x.wantSeqs("s", 2, "a new partition is unaffected", 1)
	r := x.delete([]string{"s"}, eventstore.DeleteOptions{Force: true})
	if r.Events != 5 || r.Partitions != 2 {
		x.Fatalf("Delete = %+v, want 2 partitions and 5 events (damaged rows are deleted too)", r)
	}
}

func esBadInput(x *esT) {
	ctx := x.Context()
	ev := esEvents("s", 1, 1)
	running := eventstore.StatusRunning
	empty := eventstore.Status("")
	cases := []struct {
		call string
		err  error
	}{
		{"Append(empty stream)", x.s.Append(ctx, "", 1, ev)},
		{"Append(partition 0)", x.s.Append(ctx, "s", 0, ev)},
		{"Append(partition -1)", x.s.Append(ctx, "s", -1, ev)},
		{"Append(seq 0)", x.s.Append(ctx, "s", 1, []eventstore.Event{{Seq: 0}})},
		{"Append(seq -5)", x.s.Append(ctx, "s", 1, []eventstore.Event{{Seq: -5}})},
		{"Append(seqs 1 1)", x.s.Append(ctx, "s", 1, []eventstore.Event{{Seq: 1}, {Seq: 1}})},
		{"Append(seqs 2 1)", x.s.Append(ctx, "s", 1, []eventstore.Event{{Seq: 2}, {Seq: 1}})},
		{"Read(empty stream)", func() error { _, err := x.s.Read(ctx, "", 1); return err }()},
		{"Read(partition 0)", func() error { _, err := x.s.Read(ctx, "s", 0); return err }()},
		{"Update(partition 0)", x.s.Update(ctx, "s", eventstore.StreamUpdate{Status: &running})},
		{"Update(empty stream)", x.s.Update(ctx, "", eventstore.StreamUpdate{Partition: 1})},
		{"Update(own parent)", x.s.Update(ctx, "s", eventstore.StreamUpdate{Partition: 1, Parent: esPtr("s")})},
		{"Update(empty status)", x.s.Update(ctx, "s", eventstore.StreamUpdate{Partition: 1, Status: &empty})},
		{"ApplyKV(partition 0)", x.s.ApplyKV(ctx, "s", 0, []eventstore.KVMutation{esSet("k", "v")})},
		{"ApplyKV(empty key)", x.s.ApplyKV(ctx, "s", 1, []eventstore.KVMutation{esSet("", "v")})},
		{"ApplyKV(unknown op)", x.s.ApplyKV(ctx, "s", 1, []eventstore.KVMutation{{Op: 99, Key: "k"}})},
		{"KVGet(empty key)", func() error { _, _, err := x.s.KVGet(ctx, "s", ""); return err }()},
		{"SetCustomStatus(empty stream)", func() error { _, err := x.s.SetCustomStatus(ctx, "", nil); return err }()},
		{"ListStreams(Limit -1)", func() error { _, err := x.s.ListStreams(ctx, eventstore.StreamFilter{Limit: -1}); return err }()},
		{"ListStreamInfos(Limit -1)", func() error {
			_, err := x.s.ListStreamInfos(ctx, eventstore.StreamFilter{Limit: -1})
			return err
		}()},
		{"Delete(empty id)", func() error { _, err := x.s.Delete(ctx, []string{""}, eventstore.DeleteOptions{}); return err }()},
		{"DeleteWhere(Parent set)", func() error {
			_, err := x.s.DeleteWhere(ctx, eventstore.StreamFilter{Parent: "p"})
			return err
		}()},
		{"Prune(KeepLast -1)", func() error {
			_, err := x.s.Prune(ctx, "s", eventstore.PruneOptions{KeepLast: -1})
			return err
		}()},
		{"Append(stream not UTF-8)", x.s.Append(ctx, "s\xff", 1, ev)},
		{"Append(type with NUL)", x.s.Append(ctx, "s", 1, []eventstore.Event{{Seq: 1, Type: "a\x00b"}})},
		{"Update(output not UTF-8)", x.s.Update(ctx, "s", eventstore.StreamUpdate{Partition: 1, Output: esPtr("\xc3")})},
		{"ApplyKV(key with NUL)", x.s.ApplyKV(ctx, "s", 1, []eventstore.KVMutation{esSet("k\x00", "v")})},
		{"ApplyKV(value with NUL)", x.s.ApplyKV(ctx, "s", 1, []eventstore.KVMutation{esSet("k", "v\x00")})},
		{"PruneWhere(KeepLast -1)", func() error {
			_, err := x.s.PruneWhere(ctx, eventstore.StreamFilter{}, eventstore.PruneOptions{KeepLast: -1})
			return err
		}()},
	}
	for _, c := range cases {
		x.wantErr(c.err, eventstore.ErrInvalid, c.call, "input that breaks the contract is refused")
		if inv, ok := errors.AsType[*eventstore.InvalidError](c.err); !ok || inv.Op == "" || inv.Field == "" {
			x.Fatalf("%s: error %v is not an *InvalidError naming the operation and field", c.call, c.err)
		}
	}
	if x.exists("s") {
		x.Fatal("refused calls created stream s; nothing may be written")
	}
}

func esOversizedInput(x *esT) {
	ctx := x.Context()
	x.append("s", 1, 1)
	long := strings.Repeat("n", eventstore.MaxNameSize+1)
	huge := strings.Repeat("v", eventstore.MaxValueSize+1)
	cases := []struct {
		call string
		err  error
	}{
		{"Append(long stream id)", x.s.Append(ctx, long, 1, esEvents(long, 1, 1))},
		{"Update(long name)", x.s.Update(ctx, "s", eventstore.StreamUpdate{Partition: 1, Name: &long})},
		{"Update(huge output)", x.s.Update(ctx, "s", eventstore.StreamUpdate{Partition: 1, Output: &huge})},
		{"ApplyKV(long key)", x.s.ApplyKV(ctx, "s", 1, []eventstore.KVMutation{esSet(long, "v")})},
		{"ApplyKV(huge value)", x.s.ApplyKV(ctx, "s", 1, []eventstore.KVMutation{esSet("ok", "v"), esSet("k", huge)})},
		{"SetCustomStatus(huge)", func() error { _, err := x.s.SetCustomStatus(ctx, "s", &huge); return err }()},
	}
	for _, c := range cases {
		x.wantErr(c.err, eventstore.ErrTooLarge, c.call, "sizes beyond the documented limits are refused")
	}
	info := x.info("s")
	if info.Name != "" || info.Output != nil || info.CustomStatusVersion != 0 || len(x.kvAll("s")) != 0 {
		x.Fatalf("refused calls changed the stream: %+v", info)
	}
	x.wantList(eventstore.StreamFilter{}, "a refused append creates no stream", "s")
}

// esCallAll calls every method of s with valid input and returns the errors.
func esCallAll(ctx context.Context, s eventstore.EventStore) map[string]error {
	running := eventstore.StatusRunning
	v := "v"
	errs := map[string]error{
		"Append":  s.Append(ctx, "s", 1, esEvents("s", 1, 2)),
		"Update":  s.Update(ctx, "s", eventstore.StreamUpdate{Partition: 1, Status: &running}),
		"ApplyKV": s.ApplyKV(ctx, "s", 1, []eventstore.KVMutation{esSet("k", "v")}),
	}
	_, errs["Read"] = s.Read(ctx, "s", 1)
	_, _, errs["ReadLatest"] = s.ReadLatest(ctx, "s")
	_, errs["LatestPartition"] = s.LatestPartition(ctx, "s")
	_, errs["Partitions"] = s.Partitions(ctx, "s")
	_, errs["Stream"] = s.Stream(ctx, "s")
	_, errs["ListStreams"] = s.ListStreams(ctx, eventstore.StreamFilter{})
	_, errs["ListStreamInfos"] = s.ListStreamInfos(ctx, eventstore.StreamFilter{})
	_, errs["SetCustomStatus"] = s.SetCustomStatus(ctx, "s", &v)
	_, _, errs["CustomStatus"] = s.CustomStatus(ctx, "s", 0)
	_, _, errs["KVGet"] = s.KVGet(ctx, "s", "k")
	_, errs["KVAll"] = s.KVAll(ctx, "s")
	_, errs["KVSnapshot"] = s.KVSnapshot(ctx, "s")
	_, errs["Prune"] = s.Prune(ctx, "s", eventstore.PruneOptions{})
	_, errs["PruneWhere"] = s.PruneWhere(ctx, eventstore.StreamFilter{}, eventstore.PruneOptions{})
	_, errs["Stats"] = s.Stats(ctx, "s")
	_, errs["Totals"] = s.Totals(ctx)
	_, errs["DeleteWhere"] = s.DeleteWhere(ctx, eventstore.StreamFilter{Streams: []string{"none"}})
	_, errs["Delete"] = s.Delete(ctx, []string{"s"}, eventstore.DeleteOptions{Force: true})
	return errs
}

func esClosedStore(x *esT) {
	x.append("s", 1, 1)
	x.ok(x.s.Close(), "Close")
	x.ok(x.s.Close(), "second Close")
	for name, err := range esCallAll(x.Context(), x.s) {
		x.wantErr(err, eventstore.ErrClosed, name+" after Close", "a closed store refuses every call")
	}
}

func esCanceledContext(x *esT) {
	x.append("s", 1, 1)
	ctx, cancel := context.WithCancel(x.Context())
	cancel()
	for name, err := range esCallAll(ctx, x.s) {
		x.wantErr(err, context.Canceled, name+" with a canceled context", "an ended context ends the call")
	}
	x.wantSeqs("s", 1, "calls with a canceled context write nothing", 1)
	if info := x.info("s"); info.CustomStatusVersion != 0 || len(x.kvAll("s")) != 0 {
		x.Fatalf("calls with a canceled context changed the stream: %+v", info)
	}
}
