package sqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/duroq/duroq/eventstore"
	"github.com/jmoiron/sqlx"
)

// ApplyKV implements eventstore.KVStore.
func (s *Store) ApplyKV(ctx context.Context, stream string, partition int64, muts []eventstore.KVMutation) error {
	if err := eventstore.CheckKV(stream, partition, muts); err != nil {
		return err
	}
	return s.run(ctx, "apply kv", stream, func(tx *sqlx.Tx) error { return s.applyKV(ctx, tx, stream, partition, muts) })
}

// ApplyKVTx is ApplyKV inside tx.
func (s *Store) ApplyKVTx(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, muts []eventstore.KVMutation) error {
	if err := eventstore.CheckKV(stream, partition, muts); err != nil {
		return err
	}
	return s.inTx(ctx, tx, "apply kv", stream, func() error { return s.applyKV(ctx, tx, stream, partition, muts) })
}

func (s *Store) applyKV(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, muts []eventstore.KVMutation) error {
	now := micros(s.now())
	res, err := s.d.Exec(ctx, tx, s.d.Queries.TouchStream, now, stream)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return eventstore.NotFound("apply kv", stream)
	}
	for _, m := range muts {
		at := now
		if !m.At.IsZero() {
			at = micros(m.At)
		}
		switch m.Op {
		case eventstore.KVSet:
			_, err = s.d.Exec(ctx, tx, s.d.Queries.KVPut, stream, m.Key, m.Value, partition, at)
		case eventstore.KVClear:
			_, err = s.d.Exec(ctx, tx, s.d.Queries.KVPut, stream, m.Key, nil, partition, at)
		case eventstore.KVClearAll:
			if _, err = s.d.Exec(ctx, tx, s.d.Queries.KVTombstoneDelta, partition, at, stream); err == nil {
				_, err = s.d.Exec(ctx, tx, s.d.Queries.KVTombstoneStore, stream, partition, at)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// KVGet implements eventstore.KVStore.
func (s *Store) KVGet(ctx context.Context, stream, key string) (eventstore.KVEntry, bool, error) {
	return s.KVGetTx(ctx, s.db, stream, key)
}

// KVGetTx is KVGet through q.
func (s *Store) KVGetTx(ctx context.Context, q sqlx.QueryerContext, stream, key string) (eventstore.KVEntry, bool, error) {
	const op = "kv get"
	if err := s.usableWith(ctx, op, q); err != nil {
		return eventstore.KVEntry{}, false, err
	}
	if err := eventstore.CheckKey(op, stream, key); err != nil {
		return eventstore.KVEntry{}, false, err
	}
	// The delta decides when it has the key (a tombstone hides the store's value).
	for _, query := range []string{s.d.Queries.KVDeltaGet, s.d.Queries.KVStoreGet} {
		var (
			value     sql.NullString
			partition int64
			updated   int64
		)
		err := s.scanRow(ctx, q, query, []any{stream, key}, &value, &partition, &updated)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return eventstore.KVEntry{}, false, s.wrap(op, stream, err)
		}
		if !value.Valid {
			return eventstore.KVEntry{}, false, nil
		}
		return eventstore.KVEntry{Value: value.String, Partition: partition, UpdatedAt: fromMicros(updated)}, true, nil
	}
	return eventstore.KVEntry{}, false, nil
}

// KVAll implements eventstore.KVStore.
func (s *Store) KVAll(ctx context.Context, stream string) (map[string]eventstore.KVEntry, error) {
	return s.KVAllTx(ctx, s.db, stream)
}

// KVAllTx is KVAll through q.
func (s *Store) KVAllTx(ctx context.Context, q sqlx.QueryerContext, stream string) (map[string]eventstore.KVEntry, error) {
	const op = "kv all"
	if err := s.usableWith(ctx, op, q); err != nil {
		return nil, err
	}
	if err := eventstore.CheckStream(op, stream); err != nil {
		return nil, err
	}
	kv, err := s.kvMerged(ctx, q, stream)
	return kv, s.wrap(op, stream, err)
}

func (s *Store) kvMerged(ctx context.Context, q sqlx.QueryerContext, stream string) (map[string]eventstore.KVEntry, error) {
	kv, err := s.kvStore(ctx, q, stream)
	if err != nil {
		return nil, err
	}
	delta, err := s.kvRows(ctx, q, s.d.Queries.KVDeltaAll, stream)
	if err != nil {
		return nil, err
	}
	for k, e := range delta {
		if e.tombstone {
			delete(kv, k)
		} else {
			kv[k] = e.KVEntry
		}
	}
	return kv, nil
}

// kvStore reads the store part of a stream's KV state.
func (s *Store) kvStore(ctx context.Context, q sqlx.QueryerContext, stream string) (map[string]eventstore.KVEntry, error) {
	rows, err := s.kvRows(ctx, q, s.d.Queries.KVStoreAll, stream)
	if err != nil {
		return nil, err
	}
	kv := make(map[string]eventstore.KVEntry, len(rows))
	for k, e := range rows {
		kv[k] = e.KVEntry
	}
	return kv, nil
}

// kvEntry is a row of es_kv_store or es_kv_delta; the delta's NULL value is a
// tombstone.
type kvEntry struct {
	eventstore.KVEntry
	tombstone bool
}

// kvRows reads the entries of a stream from one of the KV tables.
func (s *Store) kvRows(ctx context.Context, q sqlx.QueryerContext, query, stream string) (map[string]kvEntry, error) {
	rows, err := s.d.Query(ctx, q, query, stream)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	kv := make(map[string]kvEntry)
	for rows.Next() {
		var (
			key     string
			value   sql.NullString
			e       kvEntry
			updated int64
		)
		if err := rows.Scan(&key, &value, &e.Partition, &updated); err != nil {
			return nil, err
		}
		e.Value, e.UpdatedAt, e.tombstone = value.String, fromMicros(updated), !value.Valid
		kv[key] = e
	}
	return kv, rows.Err()
}

// KVSnapshot implements eventstore.KVStore.
func (s *Store) KVSnapshot(ctx context.Context, stream string) (map[string]eventstore.KVEntry, error) {
	return s.KVSnapshotTx(ctx, s.db, stream)
}

// KVSnapshotTx is KVSnapshot through q.
func (s *Store) KVSnapshotTx(ctx context.Context, q sqlx.QueryerContext, stream string) (map[string]eventstore.KVEntry, error) {
	const op = "kv snapshot"
	if err := s.usableWith(ctx, op, q); err != nil {
		return nil, err
	}
	if err := eventstore.CheckStream(op, stream); err != nil {
		return nil, err
	}
	kv, err := s.kvStore(ctx, q, stream)
	return kv, s.wrap(op, stream, err)
}
