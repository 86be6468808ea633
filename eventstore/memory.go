package eventstore

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/duroq/duroq/txn"
)

// MemoryOptions tune NewMemory. The zero value is usable.
type MemoryOptions struct {
	// Now is the clock every timestamp is taken from (default time.Now). Timestamps
	// are kept at microsecond precision, like the SQL backends.
	Now func() time.Time
	// Database, when set, is shared with other in-memory backends (mq.Memory) so
	// that one transaction can span them (see In and the *Tx methods). Default: a
	// private one.
	Database *txn.MemoryDatabase
}

// Memory is the in-memory reference backend of EventStore: every rule of the
// contract, nothing durable. It is meant for tests and for composing with other
// in-memory stores in one process.
//
// Every method has a twin with a Tx suffix that runs inside a transaction of the
// store's database (MemoryOptions.Database; tx from its Begin or Do): its writes are
// undone if the transaction rolls back. A Tx method MUST be given a transaction of
// this store's database, and the plain methods MUST NOT be called while the same goroutine holds one
// (the domain's lock is not reentrant).
type Memory struct {
	domain *txn.MemoryDatabase
	now    func() time.Time
	closed atomic.Bool

	// Guarded by domain.
	streams map[string]*memStream
}

type memStream struct {
	meta    memStreamMeta
	parts   map[int64]*memPartition
	kvStore map[string]KVEntry
	kvDelta map[string]memDelta
}

// memStreamMeta is replaced as a whole on every change, so a transaction can undo a
// change by restoring the previous value.
type memStreamMeta struct {
	name, version, parent string
	customStatus          *string
	customVersion         int64
	current               int64
	created, updated      time.Time
}

type memPartition struct {
	meta   memPartitionMeta
	events []memEvent // ascending Seq
}

type memPartitionMeta struct {
	status             Status
	output, pinned     *string
	started, completed time.Time
	count, bytes       int64
}

type memEvent struct {
	seq     int64
	typ     string
	data    []byte
	sum     uint32
	created time.Time
}

// memDelta is a KV delta entry; a tombstone hides the key of the store.
type memDelta struct {
	entry     KVEntry
	tombstone bool
}

var _ EventStore = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory(o MemoryOptions) *Memory {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Database == nil {
		o.Database = txn.NewMemoryDatabase()
	}
	return &Memory{domain: o.Database, now: o.Now, streams: make(map[string]*memStream)}
}

// Database implements TxStore: the in-memory database the store lives in.
func (m *Memory) Database() txn.Database { return m.domain }

// Close implements EventStore. The data stays in memory but is no longer reachable.
func (m *Memory) Close() error {
	m.closed.Store(true)
	return nil
}

// usable fails when the store is closed or ctx has ended.
func (m *Memory) usable(ctx context.Context, op string) error {
	if m.closed.Load() {
		return Closed(op)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("eventstore: %s: %w", op, err)
	}
	return nil
}

// usableTx is usable for a call inside tx.
func (m *Memory) usableTx(ctx context.Context, tx *txn.MemoryTx, op string) error {
	if err := m.usable(ctx, op); err != nil {
		return err
	}
	if tx == nil {
		return &InvalidError{Op: op, Field: "tx", Reason: "nil transaction"}
	}
	return nil
}

// run runs fn in a transaction of the store's domain, committing when fn succeeds.
func (m *Memory) run(ctx context.Context, op string, fn func(tx *txn.MemoryTx) error) error {
	if err := m.usable(ctx, op); err != nil {
		return err
	}
	return m.domain.Do(fn)
}

// view runs fn under the domain's lock and undoes nothing (fn only reads).
func (m *Memory) view(ctx context.Context, op string, fn func(tx *txn.MemoryTx) error) error {
	if err := m.usable(ctx, op); err != nil {
		return err
	}
	tx := m.domain.Begin()
	defer tx.Rollback()
	return fn(tx)
}

// stamp returns the clock's time at the precision the store keeps.
func (m *Memory) stamp() time.Time { return micro(m.now()) }

func micro(t time.Time) time.Time { return time.UnixMicro(t.UnixMicro()) }

func cloneString(s *string) *string {
	if s == nil {
		return nil
	}
	v := *s
	return &v
}

// --- transactional building blocks ---

func (m *Memory) createStream(tx *txn.MemoryTx, id string, partition int64, now time.Time) *memStream {
	s := &memStream{
		meta:  memStreamMeta{current: partition, created: now, updated: now},
		parts: make(map[int64]*memPartition),
	}
	m.streams[id] = s
	tx.Undo(func() { delete(m.streams, id) })
	return s
}

func (s *memStream) createPartition(tx *txn.MemoryTx, partition int64, now time.Time) *memPartition {
	p := &memPartition{meta: memPartitionMeta{status: StatusRunning, started: now}}
	s.parts[partition] = p
	tx.Undo(func() { delete(s.parts, partition) })
	return p
}

func (s *memStream) setMeta(tx *txn.MemoryTx, meta memStreamMeta) {
	old := s.meta
	s.meta = meta
	tx.Undo(func() { s.meta = old })
}

func (p *memPartition) setMeta(tx *txn.MemoryTx, meta memPartitionMeta) {
	old := p.meta
	p.meta = meta
	tx.Undo(func() { p.meta = old })
}

// setKV replaces the KV maps; the old ones are never mutated, so undo restores them.
func (s *memStream) setKV(tx *txn.MemoryTx, store map[string]KVEntry, delta map[string]memDelta) {
	oldStore, oldDelta := s.kvStore, s.kvDelta
	s.kvStore, s.kvDelta = store, delta
	tx.Undo(func() { s.kvStore, s.kvDelta = oldStore, oldDelta })
}

// has reports whether the partition holds seq; it looks at sequence numbers only.
func (p *memPartition) has(seq int64) bool {
	_, found := slices.BinarySearchFunc(p.events, seq, func(e memEvent, seq int64) int { return compareInt64(e.seq, seq) })
	return found
}

// insert adds events (ascending, none stored yet) keeping the partition ordered.
func (p *memPartition) insert(tx *txn.MemoryTx, events []memEvent) {
	if n := len(p.events); n == 0 || p.events[n-1].seq < events[0].seq {
		// The usual case: the events follow the stored ones.
		p.events = append(p.events, events...)
		tx.Undo(func() {
			clear(p.events[n:])
			p.events = p.events[:n]
		})
		return
	}
	old := p.events
	merged := make([]memEvent, 0, len(old)+len(events))
	i, j := 0, 0
	for i < len(old) || j < len(events) {
		if j == len(events) || (i < len(old) && old[i].seq < events[j].seq) {
			merged = append(merged, old[i])
			i++
		} else {
			merged = append(merged, events[j])
			j++
		}
	}
	p.events = merged
	tx.Undo(func() { p.events = old })
}

func (s *memStream) current() *memPartition { return s.parts[s.meta.current] }

// --- Log ---

// Append implements Log.
func (m *Memory) Append(ctx context.Context, stream string, partition int64, events []Event) error {
	return m.run(ctx, "append", func(tx *txn.MemoryTx) error { return m.AppendTx(ctx, tx, stream, partition, events) })
}

// AppendTx is Append inside tx.
func (m *Memory) AppendTx(ctx context.Context, tx *txn.MemoryTx, stream string, partition int64, events []Event) error {
	if err := m.usableTx(ctx, tx, "append"); err != nil {
		return err
	}
	if err := CheckAppend(stream, partition, events); err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	s := m.streams[stream]
	var p *memPartition
	if s != nil {
		p = s.parts[partition]
	}
	if p != nil {
		for _, e := range events {
			if p.has(e.Seq) {
				return &ConflictError{Stream: stream, Partition: partition, Seq: e.Seq}
			}
		}
	}
	now := m.stamp()
	if s == nil {
		s = m.createStream(tx, stream, partition, now)
	}
	if p == nil {
		p = s.createPartition(tx, partition, now)
	}
	stored := make([]memEvent, len(events))
	var size int64
	for i, e := range events {
		data := bytes.Clone(e.Data)
		if data == nil {
			data = []byte{}
		}
		stored[i] = memEvent{seq: e.Seq, typ: e.Type, data: data, sum: Checksum(e.Seq, e.Type, data), created: now}
		size += int64(len(data))
	}
	p.insert(tx, stored)
	pm := p.meta
	pm.count += int64(len(stored))
	pm.bytes += size
	p.setMeta(tx, pm)
	sm := s.meta
	sm.updated = now
	sm.current = max(sm.current, partition)
	s.setMeta(tx, sm)
	return nil
}

// Read implements Log.
func (m *Memory) Read(ctx context.Context, stream string, partition int64) (events []Event, err error) {
	err = m.view(ctx, "read", func(tx *txn.MemoryTx) error {
		events, err = m.ReadTx(ctx, tx, stream, partition)
		return err
	})
	return events, err
}

// ReadTx is Read inside tx.
func (m *Memory) ReadTx(ctx context.Context, tx *txn.MemoryTx, stream string, partition int64) ([]Event, error) {
	const op = "read"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return nil, err
	}
	if err := CheckPartition(op, stream, partition); err != nil {
		return nil, err
	}
	return m.readPartition(op, stream, partition)
}

func (m *Memory) readPartition(op, stream string, partition int64) ([]Event, error) {
	s := m.streams[stream]
	if s == nil || s.parts[partition] == nil {
		return []Event{}, nil
	}
	stored := s.parts[partition].events
	out := make([]Event, len(stored))
	for i, e := range stored {
		ev := Event{Seq: e.seq, Type: e.typ, Data: bytes.Clone(e.data), CreatedAt: e.created}
		if err := VerifyEvent(op, stream, partition, ev, e.sum); err != nil {
			return nil, err
		}
		out[i] = ev
	}
	return out, nil
}

// ReadLatest implements Log.
func (m *Memory) ReadLatest(ctx context.Context, stream string) (partition int64, events []Event, err error) {
	err = m.view(ctx, "read latest", func(tx *txn.MemoryTx) error {
		partition, events, err = m.ReadLatestTx(ctx, tx, stream)
		return err
	})
	return partition, events, err
}

// ReadLatestTx is ReadLatest inside tx.
func (m *Memory) ReadLatestTx(ctx context.Context, tx *txn.MemoryTx, stream string) (int64, []Event, error) {
	const op = "read latest"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return 0, nil, err
	}
	if err := CheckStream(op, stream); err != nil {
		return 0, nil, err
	}
	s := m.streams[stream]
	if s == nil {
		return 0, []Event{}, nil
	}
	events, err := m.readPartition(op, stream, s.meta.current)
	if err != nil {
		return 0, nil, err
	}
	return s.meta.current, events, nil
}

// LatestPartition implements Log.
func (m *Memory) LatestPartition(ctx context.Context, stream string) (partition int64, err error) {
	err = m.view(ctx, "latest partition", func(tx *txn.MemoryTx) error {
		partition, err = m.LatestPartitionTx(ctx, tx, stream)
		return err
	})
	return partition, err
}

// LatestPartitionTx is LatestPartition inside tx.
func (m *Memory) LatestPartitionTx(ctx context.Context, tx *txn.MemoryTx, stream string) (int64, error) {
	const op = "latest partition"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return 0, err
	}
	if err := CheckStream(op, stream); err != nil {
		return 0, err
	}
	s := m.streams[stream]
	if s == nil {
		return 0, NotFound(op, stream)
	}
	return s.meta.current, nil
}

// Partitions implements Log.
func (m *Memory) Partitions(ctx context.Context, stream string) (parts []PartitionInfo, err error) {
	err = m.view(ctx, "partitions", func(tx *txn.MemoryTx) error {
		parts, err = m.PartitionsTx(ctx, tx, stream)
		return err
	})
	return parts, err
}

// PartitionsTx is Partitions inside tx.
func (m *Memory) PartitionsTx(ctx context.Context, tx *txn.MemoryTx, stream string) ([]PartitionInfo, error) {
	const op = "partitions"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return nil, err
	}
	if err := CheckStream(op, stream); err != nil {
		return nil, err
	}
	return m.partitionInfos(stream), nil
}

func (m *Memory) partitionInfos(stream string) []PartitionInfo {
	out := []PartitionInfo{}
	s := m.streams[stream]
	if s == nil {
		return out
	}
	for n, p := range s.parts {
		out = append(out, partitionInfo(n, p))
	}
	slices.SortFunc(out, func(a, b PartitionInfo) int { return compareInt64(a.Partition, b.Partition) })
	return out
}

func partitionInfo(n int64, p *memPartition) PartitionInfo {
	return PartitionInfo{
		Partition:     n,
		Status:        p.meta.status,
		Output:        cloneString(p.meta.output),
		PinnedVersion: cloneString(p.meta.pinned),
		StartedAt:     p.meta.started,
		CompletedAt:   p.meta.completed,
		Events:        p.meta.count,
		Bytes:         p.meta.bytes,
	}
}

// --- Metadata ---

// Update implements Metadata.
func (m *Memory) Update(ctx context.Context, stream string, u StreamUpdate) error {
	return m.run(ctx, "update", func(tx *txn.MemoryTx) error { return m.UpdateTx(ctx, tx, stream, u) })
}

// UpdateTx is Update inside tx.
func (m *Memory) UpdateTx(ctx context.Context, tx *txn.MemoryTx, stream string, u StreamUpdate) error {
	if err := m.usableTx(ctx, tx, "update"); err != nil {
		return err
	}
	if err := CheckUpdate(stream, u); err != nil {
		return err
	}
	now := m.stamp()
	s := m.streams[stream]
	if s == nil {
		s = m.createStream(tx, stream, u.Partition, now)
	}
	p := s.parts[u.Partition]
	if p == nil {
		p = s.createPartition(tx, u.Partition, now)
	}
	pm := p.meta
	if u.Status != nil {
		pm.status = *u.Status
		pm.completed = time.Time{}
		if u.Status.EndsPartition() {
			pm.completed = now
		}
	}
	if u.Output != nil {
		pm.output = cloneString(u.Output)
	}
	if u.PinnedVersion != nil {
		pm.pinned = cloneString(u.PinnedVersion)
	}
	p.setMeta(tx, pm)
	sm := s.meta
	if u.Name != nil {
		sm.name = *u.Name
	}
	if u.Version != nil {
		sm.version = *u.Version
	}
	if u.Parent != nil {
		sm.parent = *u.Parent
	}
	sm.updated = now
	sm.current = max(sm.current, u.Partition)
	s.setMeta(tx, sm)
	if u.Status != nil && u.Status.EndsPartition() {
		s.mergeKV(tx, u.Partition)
	}
	return nil
}

// mergeKV moves the delta entries written for partitions up to partition into the
// store: set keys are written, tombstoned keys removed.
func (s *memStream) mergeKV(tx *txn.MemoryTx, partition int64) {
	if len(s.kvDelta) == 0 {
		return
	}
	store := maps.Clone(s.kvStore)
	if store == nil {
		store = make(map[string]KVEntry)
	}
	delta := make(map[string]memDelta)
	for k, d := range s.kvDelta {
		switch {
		case d.entry.Partition > partition:
			delta[k] = d
		case d.tombstone:
			delete(store, k)
		default:
			store[k] = d.entry
		}
	}
	s.setKV(tx, store, delta)
}

// Stream implements Metadata.
func (m *Memory) Stream(ctx context.Context, stream string) (info StreamInfo, err error) {
	err = m.view(ctx, "stream", func(tx *txn.MemoryTx) error {
		info, err = m.StreamTx(ctx, tx, stream)
		return err
	})
	return info, err
}

// StreamTx is Stream inside tx.
func (m *Memory) StreamTx(ctx context.Context, tx *txn.MemoryTx, stream string) (StreamInfo, error) {
	const op = "stream"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return StreamInfo{}, err
	}
	if err := CheckStream(op, stream); err != nil {
		return StreamInfo{}, err
	}
	s := m.streams[stream]
	if s == nil {
		return StreamInfo{}, NotFound(op, stream)
	}
	return s.info(stream), nil
}

// info returns the stream's metadata, copied out.
func (s *memStream) info(stream string) StreamInfo {
	info := StreamInfo{
		Stream:              stream,
		Name:                s.meta.name,
		Version:             s.meta.version,
		Parent:              s.meta.parent,
		CurrentPartition:    s.meta.current,
		CustomStatus:        cloneString(s.meta.customStatus),
		CustomStatusVersion: s.meta.customVersion,
		CreatedAt:           s.meta.created,
		UpdatedAt:           s.meta.updated,
	}
	if p := s.current(); p != nil {
		info.Status = p.meta.status
		info.Output = cloneString(p.meta.output)
		info.PinnedVersion = cloneString(p.meta.pinned)
		info.CompletedAt = p.meta.completed
	}
	return info
}

// ListStreams implements Metadata.
func (m *Memory) ListStreams(ctx context.Context, f StreamFilter) (ids []string, err error) {
	err = m.view(ctx, "list streams", func(tx *txn.MemoryTx) error {
		ids, err = m.ListStreamsTx(ctx, tx, f)
		return err
	})
	return ids, err
}

// ListStreamsTx is ListStreams inside tx.
func (m *Memory) ListStreamsTx(ctx context.Context, tx *txn.MemoryTx, f StreamFilter) ([]string, error) {
	const op = "list streams"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return nil, err
	}
	if err := CheckFilter(op, f); err != nil {
		return nil, err
	}
	return m.list(f), nil
}

// ListStreamInfos implements Metadata.
func (m *Memory) ListStreamInfos(ctx context.Context, f StreamFilter) (infos []StreamInfo, err error) {
	err = m.view(ctx, "list stream infos", func(tx *txn.MemoryTx) error {
		infos, err = m.ListStreamInfosTx(ctx, tx, f)
		return err
	})
	return infos, err
}

// ListStreamInfosTx is ListStreamInfos inside tx.
func (m *Memory) ListStreamInfosTx(ctx context.Context, tx *txn.MemoryTx, f StreamFilter) ([]StreamInfo, error) {
	const op = "list stream infos"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return nil, err
	}
	if err := CheckFilter(op, f); err != nil {
		return nil, err
	}
	ids := m.list(f)
	infos := make([]StreamInfo, len(ids))
	for i, id := range ids {
		infos[i] = m.streams[id].info(id)
	}
	return infos, nil
}

func (m *Memory) list(f StreamFilter) []string {
	var only map[string]bool
	if f.Streams != nil {
		only = make(map[string]bool, len(f.Streams))
		for _, id := range f.Streams {
			only[id] = true
		}
	}
	out := []string{}
	for id, s := range m.streams {
		if only != nil && !only[id] {
			continue
		}
		if f.Parent != "" && s.meta.parent != f.Parent {
			continue
		}
		if f.Name != "" && s.meta.name != f.Name || !strings.HasPrefix(id, f.IDPrefix) || f.After != "" && id <= f.After {
			continue
		}
		if !inRange(s.meta.created, f.CreatedAfter, f.CreatedBefore) || !inRange(s.meta.updated, f.UpdatedAfter, f.UpdatedBefore) {
			continue
		}
		if f.RootsOnly && s.meta.parent != "" {
			continue
		}
		p := s.current()
		if f.Status != "" && (p == nil || p.meta.status != f.Status) {
			continue
		}
		if !f.CompletedBefore.IsZero() && (p == nil || p.meta.completed.IsZero() || !p.meta.completed.Before(micro(f.CompletedBefore))) {
			continue
		}
		out = append(out, id)
	}
	sort.Strings(out)
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out
}

// inRange reports whether t is at or after from and before until (zero: no bound),
// compared at the microsecond precision timestamps are stored with.
func inRange(t, from, until time.Time) bool {
	return (from.IsZero() || !t.Before(micro(from))) && (until.IsZero() || t.Before(micro(until)))
}

// SetCustomStatus implements Metadata.
func (m *Memory) SetCustomStatus(ctx context.Context, stream string, value *string) (version int64, err error) {
	err = m.run(ctx, "set custom status", func(tx *txn.MemoryTx) error {
		version, err = m.SetCustomStatusTx(ctx, tx, stream, value)
		return err
	})
	return version, err
}

// SetCustomStatusTx is SetCustomStatus inside tx.
func (m *Memory) SetCustomStatusTx(ctx context.Context, tx *txn.MemoryTx, stream string, value *string) (int64, error) {
	const op = "set custom status"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return 0, err
	}
	if err := CheckCustomStatus(stream, value); err != nil {
		return 0, err
	}
	s := m.streams[stream]
	if s == nil {
		return 0, NotFound(op, stream)
	}
	sm := s.meta
	sm.customStatus = cloneString(value)
	sm.customVersion++
	sm.updated = m.stamp()
	s.setMeta(tx, sm)
	return sm.customVersion, nil
}

// CustomStatus implements Metadata.
func (m *Memory) CustomStatus(ctx context.Context, stream string, lastSeen int64) (cs CustomStatus, changed bool, err error) {
	err = m.view(ctx, "custom status", func(tx *txn.MemoryTx) error {
		cs, changed, err = m.CustomStatusTx(ctx, tx, stream, lastSeen)
		return err
	})
	return cs, changed, err
}

// CustomStatusTx is CustomStatus inside tx.
func (m *Memory) CustomStatusTx(ctx context.Context, tx *txn.MemoryTx, stream string, lastSeen int64) (CustomStatus, bool, error) {
	const op = "custom status"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return CustomStatus{}, false, err
	}
	if err := CheckStream(op, stream); err != nil {
		return CustomStatus{}, false, err
	}
	s := m.streams[stream]
	if s == nil || s.meta.customVersion <= lastSeen {
		return CustomStatus{}, false, nil
	}
	return CustomStatus{Value: cloneString(s.meta.customStatus), Version: s.meta.customVersion}, true, nil
}

// --- KVStore ---

// ApplyKV implements KVStore.
func (m *Memory) ApplyKV(ctx context.Context, stream string, partition int64, muts []KVMutation) error {
	return m.run(ctx, "apply kv", func(tx *txn.MemoryTx) error { return m.ApplyKVTx(ctx, tx, stream, partition, muts) })
}

// ApplyKVTx is ApplyKV inside tx.
func (m *Memory) ApplyKVTx(ctx context.Context, tx *txn.MemoryTx, stream string, partition int64, muts []KVMutation) error {
	const op = "apply kv"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return err
	}
	if err := CheckKV(stream, partition, muts); err != nil {
		return err
	}
	s := m.streams[stream]
	if s == nil {
		return NotFound(op, stream)
	}
	if len(muts) == 0 {
		return nil
	}
	now := m.stamp()
	delta := maps.Clone(s.kvDelta)
	if delta == nil {
		delta = make(map[string]memDelta)
	}
	for _, mu := range muts {
		at := now
		if !mu.At.IsZero() {
			at = micro(mu.At)
		}
		tomb := memDelta{entry: KVEntry{Partition: partition, UpdatedAt: at}, tombstone: true}
		switch mu.Op {
		case KVSet:
			delta[mu.Key] = memDelta{entry: KVEntry{Value: mu.Value, Partition: partition, UpdatedAt: at}}
		case KVClear:
			delta[mu.Key] = tomb
		case KVClearAll:
			for k := range delta {
				delta[k] = tomb
			}
			for k := range s.kvStore {
				delta[k] = tomb
			}
		}
	}
	s.setKV(tx, s.kvStore, delta)
	sm := s.meta
	sm.updated = now
	s.setMeta(tx, sm)
	return nil
}

// KVGet implements KVStore.
func (m *Memory) KVGet(ctx context.Context, stream, key string) (e KVEntry, ok bool, err error) {
	err = m.view(ctx, "kv get", func(tx *txn.MemoryTx) error {
		e, ok, err = m.KVGetTx(ctx, tx, stream, key)
		return err
	})
	return e, ok, err
}

// KVGetTx is KVGet inside tx.
func (m *Memory) KVGetTx(ctx context.Context, tx *txn.MemoryTx, stream, key string) (KVEntry, bool, error) {
	const op = "kv get"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return KVEntry{}, false, err
	}
	if err := CheckKey(op, stream, key); err != nil {
		return KVEntry{}, false, err
	}
	s := m.streams[stream]
	if s == nil {
		return KVEntry{}, false, nil
	}
	if d, ok := s.kvDelta[key]; ok {
		if d.tombstone {
			return KVEntry{}, false, nil
		}
		return d.entry, true, nil
	}
	e, ok := s.kvStore[key]
	return e, ok, nil
}

// KVAll implements KVStore.
func (m *Memory) KVAll(ctx context.Context, stream string) (kv map[string]KVEntry, err error) {
	err = m.view(ctx, "kv all", func(tx *txn.MemoryTx) error {
		kv, err = m.KVAllTx(ctx, tx, stream)
		return err
	})
	return kv, err
}

// KVAllTx is KVAll inside tx.
func (m *Memory) KVAllTx(ctx context.Context, tx *txn.MemoryTx, stream string) (map[string]KVEntry, error) {
	const op = "kv all"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return nil, err
	}
	if err := CheckStream(op, stream); err != nil {
		return nil, err
	}
	return m.kvMerged(stream), nil
}

func (m *Memory) kvMerged(stream string) map[string]KVEntry {
	out := make(map[string]KVEntry)
	s := m.streams[stream]
	if s == nil {
		return out
	}
	maps.Copy(out, s.kvStore)
	for k, d := range s.kvDelta {
		if d.tombstone {
			delete(out, k)
		} else {
			out[k] = d.entry
		}
	}
	return out
}

// KVSnapshot implements KVStore.
func (m *Memory) KVSnapshot(ctx context.Context, stream string) (kv map[string]KVEntry, err error) {
	err = m.view(ctx, "kv snapshot", func(tx *txn.MemoryTx) error {
		kv, err = m.KVSnapshotTx(ctx, tx, stream)
		return err
	})
	return kv, err
}

// KVSnapshotTx is KVSnapshot inside tx.
func (m *Memory) KVSnapshotTx(ctx context.Context, tx *txn.MemoryTx, stream string) (map[string]KVEntry, error) {
	const op = "kv snapshot"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return nil, err
	}
	if err := CheckStream(op, stream); err != nil {
		return nil, err
	}
	out := make(map[string]KVEntry)
	if s := m.streams[stream]; s != nil {
		maps.Copy(out, s.kvStore)
	}
	return out, nil
}

// --- Admin ---

// memGraph is the StreamGraph of a Memory, with a children index built on first use.
type memGraph struct {
	m        *Memory
	children map[string][]string
}

func (g *memGraph) Node(stream string) (StreamNode, bool, error) {
	s := g.m.streams[stream]
	if s == nil {
		return StreamNode{}, false, nil
	}
	n := StreamNode{Stream: stream, Parent: s.meta.parent}
	if p := s.current(); p != nil {
		n.Status = p.meta.status
	}
	return n, true, nil
}

func (g *memGraph) Children(stream string) ([]string, error) {
	if g.children == nil {
		g.children = make(map[string][]string)
		for id, s := range g.m.streams {
			if s.meta.parent != "" {
				g.children[s.meta.parent] = append(g.children[s.meta.parent], id)
			}
		}
	}
	return g.children[stream], nil
}

// Delete implements Admin.
func (m *Memory) Delete(ctx context.Context, streams []string, o DeleteOptions) (r DeleteResult, err error) {
	err = m.run(ctx, "delete", func(tx *txn.MemoryTx) error {
		r, err = m.DeleteTx(ctx, tx, streams, o)
		return err
	})
	return r, err
}

// DeleteTx is Delete inside tx.
func (m *Memory) DeleteTx(ctx context.Context, tx *txn.MemoryTx, streams []string, o DeleteOptions) (DeleteResult, error) {
	const op = "delete"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return DeleteResult{}, err
	}
	ids, err := PlanDelete(op, &memGraph{m: m}, streams, o)
	if err != nil {
		return DeleteResult{}, err
	}
	return m.remove(tx, ids), nil
}

// DeleteWhere implements Admin.
func (m *Memory) DeleteWhere(ctx context.Context, f StreamFilter) (r DeleteResult, err error) {
	err = m.run(ctx, "delete where", func(tx *txn.MemoryTx) error {
		r, err = m.DeleteWhereTx(ctx, tx, f)
		return err
	})
	return r, err
}

// DeleteWhereTx is DeleteWhere inside tx.
func (m *Memory) DeleteWhereTx(ctx context.Context, tx *txn.MemoryTx, f StreamFilter) (DeleteResult, error) {
	const op = "delete where"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return DeleteResult{}, err
	}
	if err := CheckDeleteFilter(f); err != nil {
		return DeleteResult{}, err
	}
	limit := f.Limit
	f.Limit, f.RootsOnly = 0, true
	ids, err := PlanDeleteWhere(&memGraph{m: m}, m.list(f), limit)
	if err != nil {
		return DeleteResult{}, err
	}
	return m.remove(tx, ids), nil
}

// remove deletes the streams (all known) and everything they hold.
func (m *Memory) remove(tx *txn.MemoryTx, ids []string) DeleteResult {
	r := DeleteResult{StreamIDs: ids, Streams: len(ids)}
	for _, id := range ids {
		s := m.streams[id]
		for _, p := range s.parts {
			r.Partitions++
			r.Events += int64(len(p.events))
		}
		delete(m.streams, id)
		tx.Undo(func() { m.streams[id] = s })
	}
	return r
}

// Prune implements Admin.
func (m *Memory) Prune(ctx context.Context, stream string, o PruneOptions) (r PruneResult, err error) {
	err = m.run(ctx, "prune", func(tx *txn.MemoryTx) error {
		r, err = m.PruneTx(ctx, tx, stream, o)
		return err
	})
	return r, err
}

// PruneTx is Prune inside tx.
func (m *Memory) PruneTx(ctx context.Context, tx *txn.MemoryTx, stream string, o PruneOptions) (PruneResult, error) {
	const op = "prune"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return PruneResult{}, err
	}
	if err := CheckStream(op, stream); err != nil {
		return PruneResult{}, err
	}
	if err := CheckPrune(op, stream, o); err != nil {
		return PruneResult{}, err
	}
	if m.streams[stream] == nil {
		return PruneResult{}, NotFound(op, stream)
	}
	return m.prune(tx, stream, o), nil
}

func (m *Memory) prune(tx *txn.MemoryTx, stream string, o PruneOptions) PruneResult {
	s := m.streams[stream]
	r := PruneResult{Streams: 1}
	for _, n := range Prunable(s.meta.current, m.partitionInfos(stream), o) {
		p := s.parts[n]
		r.Partitions++
		r.Events += int64(len(p.events))
		delete(s.parts, n)
		tx.Undo(func() { s.parts[n] = p })
	}
	return r
}

// PruneWhere implements Admin.
func (m *Memory) PruneWhere(ctx context.Context, f StreamFilter, o PruneOptions) (r PruneResult, err error) {
	err = m.run(ctx, "prune where", func(tx *txn.MemoryTx) error {
		r, err = m.PruneWhereTx(ctx, tx, f, o)
		return err
	})
	return r, err
}

// PruneWhereTx is PruneWhere inside tx.
func (m *Memory) PruneWhereTx(ctx context.Context, tx *txn.MemoryTx, f StreamFilter, o PruneOptions) (PruneResult, error) {
	const op = "prune where"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return PruneResult{}, err
	}
	if err := CheckFilter(op, f); err != nil {
		return PruneResult{}, err
	}
	if err := CheckPrune(op, "", o); err != nil {
		return PruneResult{}, err
	}
	var r PruneResult
	for _, id := range m.list(f) {
		one := m.prune(tx, id, o)
		r.Streams++
		r.Partitions += one.Partitions
		r.Events += one.Events
	}
	return r, nil
}

// Stats implements Admin.
func (m *Memory) Stats(ctx context.Context, stream string) (st Stats, err error) {
	err = m.view(ctx, "stats", func(tx *txn.MemoryTx) error {
		st, err = m.StatsTx(ctx, tx, stream)
		return err
	})
	return st, err
}

// StatsTx is Stats inside tx.
func (m *Memory) StatsTx(ctx context.Context, tx *txn.MemoryTx, stream string) (Stats, error) {
	const op = "stats"
	if err := m.usableTx(ctx, tx, op); err != nil {
		return Stats{}, err
	}
	if err := CheckStream(op, stream); err != nil {
		return Stats{}, err
	}
	s := m.streams[stream]
	if s == nil {
		return Stats{}, NotFound(op, stream)
	}
	st := Stats{Partition: s.meta.current}
	if p := s.current(); p != nil {
		st.Events, st.EventBytes = p.meta.count, p.meta.bytes
	}
	for _, e := range m.kvMerged(stream) {
		st.KVKeys++
		st.KVValueBytes += int64(len(e.Value))
	}
	return st, nil
}

// Totals implements Admin.
func (m *Memory) Totals(ctx context.Context) (t Totals, err error) {
	err = m.view(ctx, "totals", func(tx *txn.MemoryTx) error {
		t, err = m.TotalsTx(ctx, tx)
		return err
	})
	return t, err
}

// TotalsTx is Totals inside tx.
func (m *Memory) TotalsTx(ctx context.Context, tx *txn.MemoryTx) (Totals, error) {
	if err := m.usableTx(ctx, tx, "totals"); err != nil {
		return Totals{}, err
	}
	t := Totals{ByStatus: make(map[Status]int64)}
	for _, s := range m.streams {
		t.Streams++
		if p := s.current(); p != nil {
			t.ByStatus[p.meta.status]++
		}
		for _, p := range s.parts {
			t.Partitions++
			t.Events += p.meta.count
		}
	}
	return t, nil
}
