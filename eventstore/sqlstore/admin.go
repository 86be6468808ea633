package sqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/duroq/duroq/eventstore"
	"github.com/jmoiron/sqlx"
)

// graph is the eventstore.StreamGraph of a transaction.
type graph struct {
	ctx context.Context
	s   *Store
	q   sqlx.QueryerContext
}

func (g graph) Node(stream string) (eventstore.StreamNode, bool, error) {
	n := eventstore.StreamNode{Stream: stream}
	var status string
	err := g.s.scanRow(g.ctx, g.q, g.s.d.Queries.Node, []any{stream}, &n.Parent, &status)
	if errors.Is(err, sql.ErrNoRows) {
		return eventstore.StreamNode{}, false, nil
	}
	n.Status = eventstore.Status(status)
	return n, err == nil, err
}

func (g graph) Children(stream string) ([]string, error) {
	rows, err := g.s.d.Query(g.ctx, g.q, g.s.d.Queries.Children, stream)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var kids []string
	for rows.Next() {
		var kid string
		if err := rows.Scan(&kid); err != nil {
			return nil, err
		}
		kids = append(kids, kid)
	}
	return kids, rows.Err()
}

// Delete implements eventstore.Admin.
func (s *Store) Delete(ctx context.Context, streams []string, o eventstore.DeleteOptions) (r eventstore.DeleteResult, err error) {
	err = s.run(ctx, "delete", "", func(tx *sqlx.Tx) error {
		r, err = s.delete(ctx, tx, streams, o)
		return err
	})
	return r, err
}

// DeleteTx is Delete inside tx.
func (s *Store) DeleteTx(ctx context.Context, tx *sqlx.Tx, streams []string, o eventstore.DeleteOptions) (r eventstore.DeleteResult, err error) {
	err = s.inTx(ctx, tx, "delete", "", func() error {
		r, err = s.delete(ctx, tx, streams, o)
		return err
	})
	return r, err
}

func (s *Store) delete(ctx context.Context, tx *sqlx.Tx, streams []string, o eventstore.DeleteOptions) (eventstore.DeleteResult, error) {
	ids, err := s.lockedPlan(ctx, tx, func() ([]string, error) {
		return eventstore.PlanDelete("delete", graph{ctx, s, tx}, streams, o)
	})
	if err != nil {
		return eventstore.DeleteResult{}, err
	}
	return s.remove(ctx, tx, ids)
}

// DeleteWhere implements eventstore.Admin.
func (s *Store) DeleteWhere(ctx context.Context, f eventstore.StreamFilter) (r eventstore.DeleteResult, err error) {
	if err := eventstore.CheckDeleteFilter(f); err != nil {
		return eventstore.DeleteResult{}, err
	}
	err = s.run(ctx, "delete where", "", func(tx *sqlx.Tx) error {
		r, err = s.deleteWhere(ctx, tx, f)
		return err
	})
	return r, err
}

// DeleteWhereTx is DeleteWhere inside tx.
func (s *Store) DeleteWhereTx(ctx context.Context, tx *sqlx.Tx, f eventstore.StreamFilter) (r eventstore.DeleteResult, err error) {
	if err := eventstore.CheckDeleteFilter(f); err != nil {
		return eventstore.DeleteResult{}, err
	}
	err = s.inTx(ctx, tx, "delete where", "", func() error {
		r, err = s.deleteWhere(ctx, tx, f)
		return err
	})
	return r, err
}

func (s *Store) deleteWhere(ctx context.Context, tx *sqlx.Tx, f eventstore.StreamFilter) (eventstore.DeleteResult, error) {
	limit := f.Limit
	f.Limit, f.RootsOnly = 0, true
	// With Dialect.LockPlan, planned again once the streams are locked, so each
	// root still matches the filter when deleted.
	ids, err := s.lockedPlan(ctx, tx, func() ([]string, error) {
		candidates, err := s.listStreams(ctx, tx, f, false)
		if err != nil {
			return nil, err
		}
		return eventstore.PlanDeleteWhere(graph{ctx, s, tx}, candidates, limit)
	})
	if err != nil {
		return eventstore.DeleteResult{}, err
	}
	return s.remove(ctx, tx, ids)
}

// lockedPlan returns the streams plan picks, locked by Dialect.LockPlan if set.
func (s *Store) lockedPlan(ctx context.Context, tx *sqlx.Tx, plan func() ([]string, error)) ([]string, error) {
	if s.d.LockPlan == nil {
		return plan()
	}
	return s.d.LockPlan(ctx, tx, plan)
}

// remove deletes the streams (locked by the plan) and everything they hold,
// counting the removed rows.
func (s *Store) remove(ctx context.Context, tx *sqlx.Tx, ids []string) (eventstore.DeleteResult, error) {
	r := eventstore.DeleteResult{StreamIDs: ids, Streams: len(ids)}
	for _, arg := range each(s.d.Arrays, ids) {
		for _, step := range []struct {
			query string
			count *int64
		}{
			{s.d.Queries.DeleteEvents, &r.Events},
			{s.d.Queries.DeletePartitions, &r.Partitions},
			{s.d.Queries.DeleteKVStore, nil},
			{s.d.Queries.DeleteKVDelta, nil},
			{s.d.Queries.DeleteStreams, nil},
		} {
			res, err := s.d.Exec(ctx, tx, step.query, arg)
			if err != nil {
				return eventstore.DeleteResult{}, err
			}
			if step.count != nil {
				n, err := res.RowsAffected()
				if err != nil {
					return eventstore.DeleteResult{}, err
				}
				*step.count += n
			}
		}
	}
	return r, nil
}

// Prune implements eventstore.Admin.
func (s *Store) Prune(ctx context.Context, stream string, o eventstore.PruneOptions) (r eventstore.PruneResult, err error) {
	if err := checkPrune(stream, o); err != nil {
		return eventstore.PruneResult{}, err
	}
	err = s.run(ctx, "prune", stream, func(tx *sqlx.Tx) error {
		r, err = s.pruneStream(ctx, tx, stream, o)
		return err
	})
	return r, err
}

// PruneTx is Prune inside tx.
func (s *Store) PruneTx(ctx context.Context, tx *sqlx.Tx, stream string, o eventstore.PruneOptions) (r eventstore.PruneResult, err error) {
	if err := checkPrune(stream, o); err != nil {
		return eventstore.PruneResult{}, err
	}
	err = s.inTx(ctx, tx, "prune", stream, func() error {
		r, err = s.pruneStream(ctx, tx, stream, o)
		return err
	})
	return r, err
}

func checkPrune(stream string, o eventstore.PruneOptions) error {
	if err := eventstore.CheckStream("prune", stream); err != nil {
		return err
	}
	return eventstore.CheckPrune("prune", stream, o)
}

func (s *Store) pruneStream(ctx context.Context, tx *sqlx.Tx, stream string, o eventstore.PruneOptions) (eventstore.PruneResult, error) {
	r, found, err := s.prune(ctx, tx, stream, o)
	if err == nil && !found {
		return eventstore.PruneResult{}, eventstore.NotFound("prune", stream)
	}
	return r, err
}

// prune locks the stream, then removes the partitions eventstore.Prunable picks;
// found is false for an unknown stream.
func (s *Store) prune(ctx context.Context, tx *sqlx.Tx, stream string, o eventstore.PruneOptions) (r eventstore.PruneResult, found bool, err error) {
	current, found, err := s.currentPartition(ctx, tx, stream, true)
	if err != nil || !found {
		return eventstore.PruneResult{}, found, err
	}
	parts, err := s.partitions(ctx, tx, stream)
	if err != nil {
		return eventstore.PruneResult{}, true, err
	}
	r = eventstore.PruneResult{Streams: 1}
	for _, arg := range each(s.d.Arrays, eventstore.Prunable(current, parts, o)) {
		res, err := s.d.Exec(ctx, tx, s.d.Queries.PruneEvents, stream, arg)
		if err != nil {
			return eventstore.PruneResult{}, true, err
		}
		events, err := res.RowsAffected()
		if err != nil {
			return eventstore.PruneResult{}, true, err
		}
		if res, err = s.d.Exec(ctx, tx, s.d.Queries.PrunePartitions, stream, arg); err != nil {
			return eventstore.PruneResult{}, true, err
		}
		partitions, err := res.RowsAffected()
		if err != nil {
			return eventstore.PruneResult{}, true, err
		}
		r.Events += events
		r.Partitions += partitions
	}
	return r, true, nil
}

// PruneWhere implements eventstore.Admin.
func (s *Store) PruneWhere(ctx context.Context, f eventstore.StreamFilter, o eventstore.PruneOptions) (r eventstore.PruneResult, err error) {
	if err := checkPruneWhere(f, o); err != nil {
		return eventstore.PruneResult{}, err
	}
	err = s.run(ctx, "prune where", "", func(tx *sqlx.Tx) error {
		r, err = s.pruneWhere(ctx, tx, f, o)
		return err
	})
	return r, err
}

// PruneWhereTx is PruneWhere inside tx.
func (s *Store) PruneWhereTx(ctx context.Context, tx *sqlx.Tx, f eventstore.StreamFilter, o eventstore.PruneOptions) (r eventstore.PruneResult, err error) {
	if err := checkPruneWhere(f, o); err != nil {
		return eventstore.PruneResult{}, err
	}
	err = s.inTx(ctx, tx, "prune where", "", func() error {
		r, err = s.pruneWhere(ctx, tx, f, o)
		return err
	})
	return r, err
}

func checkPruneWhere(f eventstore.StreamFilter, o eventstore.PruneOptions) error {
	if err := eventstore.CheckFilter("prune where", f); err != nil {
		return err
	}
	return eventstore.CheckPrune("prune where", "", o)
}

func (s *Store) pruneWhere(ctx context.Context, tx *sqlx.Tx, f eventstore.StreamFilter, o eventstore.PruneOptions) (eventstore.PruneResult, error) {
	ids, err := s.listStreams(ctx, tx, f, true)
	if err != nil {
		return eventstore.PruneResult{}, err
	}
	var r eventstore.PruneResult
	for _, id := range ids {
		one, found, err := s.prune(ctx, tx, id, o)
		if err != nil {
			return eventstore.PruneResult{}, err
		}
		if !found {
			continue // deleted since it was selected
		}
		r.Streams++
		r.Partitions += one.Partitions
		r.Events += one.Events
	}
	return r, nil
}

// Stats implements eventstore.Admin.
func (s *Store) Stats(ctx context.Context, stream string) (eventstore.Stats, error) {
	return s.StatsTx(ctx, s.db, stream)
}

// StatsTx is Stats through q. Event figures come from the partition's counters; no
// event is read.
func (s *Store) StatsTx(ctx context.Context, q sqlx.QueryerContext, stream string) (eventstore.Stats, error) {
	const op = "stats"
	if err := s.usableWith(ctx, op, q); err != nil {
		return eventstore.Stats{}, err
	}
	if err := eventstore.CheckStream(op, stream); err != nil {
		return eventstore.Stats{}, err
	}
	var st eventstore.Stats
	err := s.scanRow(ctx, q, s.d.Queries.Stats, []any{stream}, &st.Partition, &st.Events, &st.EventBytes)
	if errors.Is(err, sql.ErrNoRows) {
		return eventstore.Stats{}, eventstore.NotFound(op, stream)
	}
	if err != nil {
		return eventstore.Stats{}, s.wrap(op, stream, err)
	}
	kv, err := s.kvMerged(ctx, q, stream)
	if err != nil {
		return eventstore.Stats{}, s.wrap(op, stream, err)
	}
	for _, e := range kv {
		st.KVKeys++
		st.KVValueBytes += int64(len(e.Value))
	}
	return st, nil
}

// Totals implements eventstore.Admin.
func (s *Store) Totals(ctx context.Context) (eventstore.Totals, error) {
	return s.TotalsTx(ctx, s.db)
}

// TotalsTx is Totals through q.
func (s *Store) TotalsTx(ctx context.Context, q sqlx.QueryerContext) (eventstore.Totals, error) {
	const op = "totals"
	if err := s.usableWith(ctx, op, q); err != nil {
		return eventstore.Totals{}, err
	}
	t := eventstore.Totals{ByStatus: make(map[eventstore.Status]int64)}
	if err := s.scanRow(ctx, q, s.d.Queries.TotalStreams, nil, &t.Streams); err != nil {
		return eventstore.Totals{}, s.wrap(op, "", err)
	}
	if err := s.scanRow(ctx, q, s.d.Queries.TotalPartitions, nil, &t.Partitions, &t.Events); err != nil {
		return eventstore.Totals{}, s.wrap(op, "", err)
	}
	rows, err := s.d.Query(ctx, q, s.d.Queries.TotalsByStatus)
	if err != nil {
		return eventstore.Totals{}, s.wrap(op, "", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			status string
			n      int64
		)
		if err := rows.Scan(&status, &n); err != nil {
			return eventstore.Totals{}, s.wrap(op, "", err)
		}
		t.ByStatus[eventstore.Status(status)] = n
	}
	return t, s.wrap(op, "", rows.Err())
}
