package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/duroq/duroq/eventstore"
	"github.com/jmoiron/sqlx"
)

// Update implements eventstore.Metadata.
func (s *Store) Update(ctx context.Context, stream string, u eventstore.StreamUpdate) error {
	if err := eventstore.CheckUpdate(stream, u); err != nil {
		return err
	}
	return s.run(ctx, "update", stream, func(tx *sqlx.Tx) error { return s.update(ctx, tx, stream, u) })
}

// UpdateTx is Update inside tx.
func (s *Store) UpdateTx(ctx context.Context, tx *sqlx.Tx, stream string, u eventstore.StreamUpdate) error {
	if err := eventstore.CheckUpdate(stream, u); err != nil {
		return err
	}
	return s.inTx(ctx, tx, "update", stream, func() error { return s.update(ctx, tx, stream, u) })
}

// update writes the stream's and the partition's rows (Dialect.UpdateRows) and,
// when the partition ends, merges the KV delta.
func (s *Store) update(ctx context.Context, tx *sqlx.Tx, stream string, u eventstore.StreamUpdate) error {
	var status any
	ends := false
	if u.Status != nil {
		status, ends = string(*u.Status), u.Status.EndsPartition()
	}
	if err := s.d.UpdateRows(ctx, tx, stream, u, status, ends, micros(s.now())); err != nil {
		return err
	}
	if ends {
		return s.mergeKV(ctx, tx, stream, u.Partition)
	}
	return nil
}

// mergeKV merges into the KV store the delta written for partition and earlier
// ones. Most streams have none: one probe then saves the three merge statements.
func (s *Store) mergeKV(ctx context.Context, tx *sqlx.Tx, stream string, partition int64) error {
	var pending bool
	if err := s.scanRow(ctx, tx, sqlx.Rebind(s.d.Bind, `SELECT EXISTS (SELECT 1 FROM es_kv_delta WHERE stream = ?)`), []any{stream}, &pending); err != nil || !pending {
		return err
	}
	return s.merge(ctx, tx, stream, partition)
}

// mergeEnded merges the KV delta of the commits that end their partition, probing
// for the streams that have one in one statement for all of them.
func (s *Store) mergeEnded(ctx context.Context, tx *sqlx.Tx, commits []eventstore.StreamCommit) error {
	ended := make(map[string]int64) // the partition each ends
	var streams []string
	for _, c := range commits {
		if st := c.Update.Status; st != nil && st.EndsPartition() {
			ended[c.Stream] = c.Update.Partition
			streams = append(streams, c.Stream)
		}
	}
	if len(streams) == 0 {
		return nil
	}
	list, err := s.streamList(streams)
	if err != nil {
		return err
	}
	rows, err := s.d.Query(ctx, tx, sqlx.Rebind(s.d.Bind, "SELECT DISTINCT s.stream FROM es_kv_delta s WHERE "+s.d.Queries.StreamIn), list)
	if err != nil {
		return err
	}
	var pending []string
	for rows.Next() {
		var stream string
		if err := rows.Scan(&stream); err != nil {
			rows.Close()
			return err
		}
		pending = append(pending, stream)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, stream := range pending {
		if err := s.merge(ctx, tx, stream, ended[stream]); err != nil {
			return err
		}
	}
	return nil
}

// merge runs the three merge statements of a stream's ended partition.
func (s *Store) merge(ctx context.Context, tx *sqlx.Tx, stream string, partition int64) error {
	for _, q := range []string{s.d.Queries.MergeKVSet, s.d.Queries.MergeKVClear, s.d.Queries.MergeKVDrop} {
		if _, err := s.d.Exec(ctx, tx, q, stream, partition); err != nil {
			return err
		}
	}
	return nil
}

// CommitManyTx appends and updates many streams inside tx, as AppendTx then UpdateTx
// for each commit would, in the constant number of statements of Dialect.CommitMany.
// It is all or nothing: on
// error nothing of it is written.
func (s *Store) CommitManyTx(ctx context.Context, tx *sqlx.Tx, commits []eventstore.StreamCommit) error {
	const op = "commit"
	if err := s.usable(ctx, op); err != nil {
		return err
	}
	seen := make(map[string]bool, len(commits))
	for _, c := range commits {
		if err := eventstore.CheckAppend(c.Stream, c.Update.Partition, c.Events); err != nil {
			return err
		}
		if err := eventstore.CheckUpdate(c.Stream, c.Update); err != nil {
			return err
		}
		if seen[c.Stream] {
			return &eventstore.InvalidError{Op: op, Stream: c.Stream, Field: "commits", Reason: "stream committed twice"}
		}
		seen[c.Stream] = true
	}
	if len(commits) == 0 {
		return nil
	}
	return s.inTx(ctx, tx, op, commits[0].Stream, func() error {
		if err := s.d.CommitMany(ctx, tx, commits, micros(s.now())); err != nil {
			return err
		}
		return s.mergeEnded(ctx, tx, commits)
	})
}

// Stream implements eventstore.Metadata.
func (s *Store) Stream(ctx context.Context, stream string) (eventstore.StreamInfo, error) {
	return s.StreamTx(ctx, s.db, stream)
}

// StreamTx is Stream through q.
func (s *Store) StreamTx(ctx context.Context, q sqlx.QueryerContext, stream string) (eventstore.StreamInfo, error) {
	const op = "stream"
	if err := s.usableWith(ctx, op, q); err != nil {
		return eventstore.StreamInfo{}, err
	}
	if err := eventstore.CheckStream(op, stream); err != nil {
		return eventstore.StreamInfo{}, err
	}
	var r streamRow
	err := s.scanRow(ctx, q, s.d.Queries.Stream, []any{stream}, r.dest()...)
	if errors.Is(err, sql.ErrNoRows) {
		return eventstore.StreamInfo{}, eventstore.NotFound(op, stream)
	}
	if err != nil {
		return eventstore.StreamInfo{}, s.wrap(op, stream, err)
	}
	return r.info(stream), nil
}

// streamRow holds the columns of Queries.Stream.
type streamRow struct {
	i                          eventstore.StreamInfo
	streamStatus               string
	custom                     sql.NullString
	created, updated           int64
	partStatus, output, pinned sql.NullString
	completed                  sql.NullInt64
}

func (r *streamRow) dest() []any {
	return []any{&r.i.Name, &r.i.Version, &r.i.Parent, &r.streamStatus, &r.i.CurrentPartition,
		&r.custom, &r.i.CustomStatusVersion, &r.created, &r.updated,
		&r.partStatus, &r.output, &r.pinned, &r.completed}
}

func (r *streamRow) info(stream string) eventstore.StreamInfo {
	info := r.i
	info.Stream = stream
	info.Status = eventstore.Status(r.streamStatus)
	if r.partStatus.Valid {
		info.Status = eventstore.Status(r.partStatus.String)
	}
	info.Output, info.PinnedVersion, info.CompletedAt = stringPtr(r.output), stringPtr(r.pinned), timeOrZero(r.completed)
	info.CustomStatus = stringPtr(r.custom)
	info.CreatedAt, info.UpdatedAt = fromMicros(r.created), fromMicros(r.updated)
	return info
}

// ListStreams implements eventstore.Metadata.
func (s *Store) ListStreams(ctx context.Context, f eventstore.StreamFilter) ([]string, error) {
	return s.ListStreamsTx(ctx, s.db, f)
}

// ListStreamsTx is ListStreams through q.
func (s *Store) ListStreamsTx(ctx context.Context, q sqlx.QueryerContext, f eventstore.StreamFilter) ([]string, error) {
	const op = "list streams"
	if err := s.usableWith(ctx, op, q); err != nil {
		return nil, err
	}
	if err := eventstore.CheckFilter(op, f); err != nil {
		return nil, err
	}
	ids, err := s.listStreams(ctx, q, f, false)
	return ids, s.wrap(op, "", err)
}

// ListStreamInfos implements eventstore.Metadata.
func (s *Store) ListStreamInfos(ctx context.Context, f eventstore.StreamFilter) ([]eventstore.StreamInfo, error) {
	return s.ListStreamInfosTx(ctx, s.db, f)
}

// ListStreamInfosTx is ListStreamInfos through q, in one statement.
func (s *Store) ListStreamInfosTx(ctx context.Context, q sqlx.QueryerContext, f eventstore.StreamFilter) ([]eventstore.StreamInfo, error) {
	const op = "list stream infos"
	if err := s.usableWith(ctx, op, q); err != nil {
		return nil, err
	}
	if err := eventstore.CheckFilter(op, f); err != nil {
		return nil, err
	}
	infos, err := s.listStreamInfos(ctx, q, f)
	return infos, s.wrap(op, "", err)
}

func (s *Store) listStreamInfos(ctx context.Context, q sqlx.QueryerContext, f eventstore.StreamFilter) ([]eventstore.StreamInfo, error) {
	query, args, err := s.streamInfosQuery(f)
	if err != nil {
		return nil, err
	}
	rows, err := s.d.Query(ctx, q, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	infos := []eventstore.StreamInfo{}
	for rows.Next() {
		var (
			stream string
			r      streamRow
		)
		if err := rows.Scan(append([]any{&stream}, r.dest()...)...); err != nil {
			return nil, err
		}
		infos = append(infos, r.info(stream))
	}
	return infos, rows.Err()
}

// streamInfosQuery returns ListStreamInfos' statement for f and its arguments. The
// page's streams are selected first, then joined with their current partitions: a
// join of the whole selection could merge es_partitions from its start, reading
// every partition before a deep page.
func (s *Store) streamInfosQuery(f eventstore.StreamFilter) (string, []any, error) {
	page, args, err := s.selectStreams("s.*", f)
	return sqlx.Rebind(s.d.Bind, "SELECT s.stream, "+streamFields+" FROM ("+page+") s "+joinCurrentPartition+" ORDER BY s.stream"), args, err
}

// listStreams selects the ids of the streams f selects. With lock set (q must be a
// transaction) the selected streams are locked (Queries.LockSelected), and a stream
// changed meanwhile is selected only if it still matches.
func (s *Store) listStreams(ctx context.Context, q sqlx.QueryerContext, f eventstore.StreamFilter, lock bool) ([]string, error) {
	query, args, err := s.selectStreams("s.stream", f)
	if err != nil {
		return nil, err
	}
	if lock {
		query += s.d.Queries.LockSelected
	}
	ids := []string{}
	err = sqlx.SelectContext(ctx, q, &ids, sqlx.Rebind(s.d.Bind, query), args...)
	return ids, err
}

// selectStreams returns the query, written with ?, of columns of the streams s
// that f selects, in id order, and its arguments.
//
// A page is a range of an index in id order, whatever the number of streams: the
// primary key (no condition, IDPrefix, After), es_streams_status (Status),
// es_streams_name (Name), es_streams_parent (Parent) and es_streams_roots
// (RootsOnly), each keyed by the column, then the id (PostgreSQL's planner may read
// the primary key and skip the other streams instead when a status or name is
// common: a page then reads about Limit divided by its share). The time ranges and
// CompletedBefore have none: a time index would give the rows in time order, to be
// sorted by id, so they filter a scan in id order (along one of the indexes when
// another condition is set), which stops at the page's end but reads every stream
// it passes. Streams looks its ids up in the primary key.
func (s *Store) selectStreams(columns string, f eventstore.StreamFilter) (string, []any, error) {
	var (
		query strings.Builder
		conds []string
		args  []any
	)
	query.WriteString("SELECT " + columns + " FROM es_streams s")
	if !f.CompletedBefore.IsZero() {
		query.WriteString(" JOIN es_partitions p ON p.stream = s.stream AND p.partition = s.current_partition")
		conds = append(conds, "p.completed_at < ?")
		args = append(args, micros(f.CompletedBefore))
	}
	if f.Streams != nil {
		ids, err := s.streamList(f.Streams)
		if err != nil {
			return "", nil, err
		}
		conds = append(conds, s.d.Queries.StreamIn)
		args = append(args, ids)
	}
	if f.Status != "" {
		conds = append(conds, "s.status = ?")
		args = append(args, string(f.Status))
	}
	if f.Parent != "" {
		conds = append(conds, "s.parent = ?")
		args = append(args, f.Parent)
	}
	if f.RootsOnly {
		conds = append(conds, "s.parent IS NULL")
	}
	if f.Name != "" {
		conds = append(conds, "s.name = ?")
		args = append(args, f.Name)
	}
	if f.IDPrefix != "" {
		// Ids compare in byte order, so those with the prefix are one range of the
		// primary key.
		conds = append(conds, "s.stream >= ?")
		args = append(args, f.IDPrefix)
		if end, ok := prefixEnd(f.IDPrefix); ok {
			conds = append(conds, "s.stream < ?")
			args = append(args, end)
		}
	}
	if f.After != "" {
		conds = append(conds, "s.stream > ?")
		args = append(args, f.After)
	}
	for _, r := range []struct {
		column      string
		from, until time.Time
	}{{"s.created_at", f.CreatedAfter, f.CreatedBefore}, {"s.updated_at", f.UpdatedAfter, f.UpdatedBefore}} {
		if !r.from.IsZero() {
			conds = append(conds, r.column+" >= ?")
			args = append(args, micros(r.from))
		}
		if !r.until.IsZero() {
			conds = append(conds, r.column+" < ?")
			args = append(args, micros(r.until))
		}
	}
	if len(conds) > 0 {
		query.WriteString(" WHERE " + strings.Join(conds, " AND "))
	}
	query.WriteString(" ORDER BY s.stream")
	if f.Limit > 0 {
		query.WriteString(" LIMIT ?")
		args = append(args, f.Limit)
	}
	return query.String(), args, nil
}

// streamList binds ids as the one parameter of Queries.StreamIn, whatever their
// number (no bound-variable limit): an array, or JSON text (see Dialect.Arrays).
func (s *Store) streamList(ids []string) (any, error) {
	if s.d.Arrays {
		return ids, nil
	}
	text, err := json.Marshal(ids)
	return string(text), err
}

// SetCustomStatus implements eventstore.Metadata.
func (s *Store) SetCustomStatus(ctx context.Context, stream string, value *string) (version int64, err error) {
	if err := eventstore.CheckCustomStatus(stream, value); err != nil {
		return 0, err
	}
	err = s.run(ctx, "set custom status", stream, func(tx *sqlx.Tx) error {
		version, err = s.setCustomStatus(ctx, tx, stream, value)
		return err
	})
	return version, err
}

// SetCustomStatusTx is SetCustomStatus inside tx.
func (s *Store) SetCustomStatusTx(ctx context.Context, tx *sqlx.Tx, stream string, value *string) (version int64, err error) {
	if err := eventstore.CheckCustomStatus(stream, value); err != nil {
		return 0, err
	}
	err = s.inTx(ctx, tx, "set custom status", stream, func() error {
		version, err = s.setCustomStatus(ctx, tx, stream, value)
		return err
	})
	return version, err
}

func (s *Store) setCustomStatus(ctx context.Context, tx *sqlx.Tx, stream string, value *string) (int64, error) {
	var version int64
	err := s.scanRow(ctx, tx, s.d.Queries.SetCustomStatus, []any{NullString(value), micros(s.now()), stream}, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, eventstore.NotFound("set custom status", stream)
	}
	return version, err
}

// CustomStatus implements eventstore.Metadata.
func (s *Store) CustomStatus(ctx context.Context, stream string, lastSeen int64) (eventstore.CustomStatus, bool, error) {
	return s.CustomStatusTx(ctx, s.db, stream, lastSeen)
}

// CustomStatusTx is CustomStatus through q.
func (s *Store) CustomStatusTx(ctx context.Context, q sqlx.QueryerContext, stream string, lastSeen int64) (eventstore.CustomStatus, bool, error) {
	const op = "custom status"
	if err := s.usableWith(ctx, op, q); err != nil {
		return eventstore.CustomStatus{}, false, err
	}
	if err := eventstore.CheckStream(op, stream); err != nil {
		return eventstore.CustomStatus{}, false, err
	}
	var (
		value   sql.NullString
		version int64
	)
	err := s.scanRow(ctx, q, s.d.Queries.CustomStatus, []any{stream, lastSeen}, &value, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return eventstore.CustomStatus{}, false, nil
	}
	if err != nil {
		return eventstore.CustomStatus{}, false, s.wrap(op, stream, err)
	}
	return eventstore.CustomStatus{Value: stringPtr(value), Version: version}, true, nil
}

// prefixEnd returns the least string greater than every string that starts with
// prefix, in byte order; ok is false when there is none. For UTF-8 it increments the
// last code point (UTF-8 orders bytes as code points), so that PostgreSQL, whose text
// must be UTF-8, can take it; otherwise the last byte below 0xff.
func prefixEnd(prefix string) (end string, ok bool) {
	if !utf8.ValidString(prefix) {
		b := []byte(prefix)
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] < 0xff {
				b[i]++
				return string(b[:i+1]), true
			}
		}
		return "", false
	}
	for prefix != "" {
		r, size := utf8.DecodeLastRuneInString(prefix)
		prefix = prefix[:len(prefix)-size]
		switch {
		case r == utf8.MaxRune:
			continue
		case r == 0xD7FF: // the surrogates are no characters
			return prefix + string(rune(0xE000)), true
		default:
			return prefix + string(r+1), true
		}
	}
	return "", false
}
