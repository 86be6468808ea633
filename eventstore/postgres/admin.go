package postgres

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"

	"github.com/duroq/duroq/eventstore"
	"github.com/jmoiron/sqlx"
)

// graph is the eventstore.StreamGraph of a transaction.
type graph struct {
	ctx context.Context
	q   sqlx.QueryerContext
}

func (g graph) Node(stream string) (eventstore.StreamNode, bool, error) {
	n := eventstore.StreamNode{Stream: stream}
	var status string
	err := scanRow(g.ctx, g.q, qNode, []any{stream}, &n.Parent, &status)
	if errors.Is(err, sql.ErrNoRows) {
		return eventstore.StreamNode{}, false, nil
	}
	n.Status = eventstore.Status(status)
	return n, err == nil, err
}

func (g graph) Children(stream string) ([]string, error) {
	var kids []string
	err := sqlx.SelectContext(g.ctx, g.q, &kids, qChildren, stream)
	return kids, err
}

// maxPlanRounds bounds lockedPlan's rounds; each round finds streams that joined
// the plan since the previous one.
const maxPlanRounds = 8

// planSavepoint lets lockedPlan give back the locks of a round.
const planSavepoint = "duroq_eventstore_plan"

// lockedPlan returns the streams plan picks, locked. It plans, locks the picked
// streams in id order (qLockStreams, the order of every statement that locks
// several streams, so two deletes never wait for each other) and plans again, now
// over streams nobody else can change. If the plan has grown meanwhile (a new child
// joined a tree), the locks are given back (the savepoint) and the larger set is
// locked again in id order. A failed plan fails the call: judged before the locks
// (say, on a running stream), it is the answer of a delete ordered before the
// writers still in flight.
func lockedPlan(ctx context.Context, tx *sqlx.Tx, plan func() ([]string, error)) ([]string, error) {
	ids, err := plan()
	if err != nil || len(ids) == 0 {
		return ids, err
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+planSavepoint); err != nil {
		return nil, err
	}
	wanted := make(map[string]bool) // every stream a plan picked so far
	for round := 0; ; round++ {
		if round == maxPlanRounds {
			return nil, errors.New("the streams to delete kept changing; try again")
		}
		for _, id := range ids {
			wanted[id] = true
		}
		if round > 0 {
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+planSavepoint); err != nil {
				return nil, err
			}
		}
		// A stream deleted meanwhile is not locked; if it is created again before
		// the next plan, that plan picks an unlocked stream and locks once more.
		var got []string
		if err := sqlx.SelectContext(ctx, tx, &got, qLockStreams, slices.Collect(maps.Keys(wanted))); err != nil {
			return nil, err
		}
		locked := make(map[string]bool, len(got))
		for _, id := range got {
			locked[id] = true
		}
		if ids, err = plan(); err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(ids, func(id string) bool { return !locked[id] }) {
			_, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+planSavepoint)
			return ids, err
		}
	}
}

// Delete implements eventstore.Admin.
func (s *Store) Delete(ctx context.Context, streams []string, o eventstore.DeleteOptions) (r eventstore.DeleteResult, err error) {
	err = s.run(ctx, "delete", "", func(tx *sqlx.Tx) error {
		r, err = deleteStreams(ctx, tx, streams, o)
		return err
	})
	return r, err
}

// DeleteTx is Delete inside tx. The adapter uses DeleteResult.StreamIDs to remove the
// deleted streams' queue messages in the same transaction.
func (s *Store) DeleteTx(ctx context.Context, tx *sqlx.Tx, streams []string, o eventstore.DeleteOptions) (r eventstore.DeleteResult, err error) {
	err = s.inTx(ctx, tx, "delete", "", func() error {
		r, err = deleteStreams(ctx, tx, streams, o)
		return err
	})
	return r, err
}

func deleteStreams(ctx context.Context, tx *sqlx.Tx, streams []string, o eventstore.DeleteOptions) (eventstore.DeleteResult, error) {
	ids, err := lockedPlan(ctx, tx, func() ([]string, error) {
		return eventstore.PlanDelete("delete", graph{ctx, tx}, streams, o)
	})
	if err != nil {
		return eventstore.DeleteResult{}, err
	}
	return remove(ctx, tx, ids)
}

// DeleteWhere implements eventstore.Admin.
func (s *Store) DeleteWhere(ctx context.Context, f eventstore.StreamFilter) (r eventstore.DeleteResult, err error) {
	if err := eventstore.CheckDeleteFilter(f); err != nil {
		return eventstore.DeleteResult{}, err
	}
	err = s.run(ctx, "delete where", "", func(tx *sqlx.Tx) error {
		r, err = deleteWhere(ctx, tx, f)
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
		r, err = deleteWhere(ctx, tx, f)
		return err
	})
	return r, err
}

func deleteWhere(ctx context.Context, tx *sqlx.Tx, f eventstore.StreamFilter) (eventstore.DeleteResult, error) {
	limit := f.Limit
	f.Limit, f.RootsOnly = 0, true
	// Planned again once the streams are locked, so each root still matches the
	// filter when deleted.
	ids, err := lockedPlan(ctx, tx, func() ([]string, error) {
		candidates, err := listStreams(ctx, tx, f, false)
		if err != nil {
			return nil, err
		}
		return eventstore.PlanDeleteWhere(graph{ctx, tx}, candidates, limit)
	})
	if err != nil {
		return eventstore.DeleteResult{}, err
	}
	return remove(ctx, tx, ids)
}

// remove deletes the streams (locked by the plan) and everything they hold, one
// statement per table, counting the removed rows.
func remove(ctx context.Context, tx *sqlx.Tx, ids []string) (eventstore.DeleteResult, error) {
	r := eventstore.DeleteResult{StreamIDs: ids, Streams: len(ids)}
	if len(ids) == 0 {
		return r, nil
	}
	for _, step := range []struct {
		query string
		count *int64
	}{
		{qDeleteEvents, &r.Events},
		{qDeletePartitions, &r.Partitions},
		{qDeleteKVStore, nil},
		{qDeleteKVDelta, nil},
		{qDeleteStreams, nil},
	} {
		res, err := tx.ExecContext(ctx, step.query, ids)
		if err != nil {
			return eventstore.DeleteResult{}, err
		}
		if step.count != nil {
			if *step.count, err = res.RowsAffected(); err != nil {
				return eventstore.DeleteResult{}, err
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
		r, err = pruneStream(ctx, tx, stream, o)
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
		r, err = pruneStream(ctx, tx, stream, o)
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

func pruneStream(ctx context.Context, tx *sqlx.Tx, stream string, o eventstore.PruneOptions) (eventstore.PruneResult, error) {
	r, found, err := prune(ctx, tx, stream, o)
	if err == nil && !found {
		return eventstore.PruneResult{}, eventstore.NotFound("prune", stream)
	}
	return r, err
}

// prune locks the stream, then removes the partitions eventstore.Prunable picks;
// found is false for an unknown stream.
func prune(ctx context.Context, tx *sqlx.Tx, stream string, o eventstore.PruneOptions) (r eventstore.PruneResult, found bool, err error) {
	current, found, err := currentPartition(ctx, tx, stream, true)
	if err != nil || !found {
		return eventstore.PruneResult{}, found, err
	}
	parts, err := partitions(ctx, tx, stream)
	if err != nil {
		return eventstore.PruneResult{}, true, err
	}
	r = eventstore.PruneResult{Streams: 1}
	doomed := eventstore.Prunable(current, parts, o)
	if len(doomed) == 0 {
		return r, true, nil
	}
	res, err := tx.ExecContext(ctx, qPruneEvents, stream, doomed)
	if err != nil {
		return eventstore.PruneResult{}, true, err
	}
	if r.Events, err = res.RowsAffected(); err != nil {
		return eventstore.PruneResult{}, true, err
	}
	if res, err = tx.ExecContext(ctx, qPrunePartitions, stream, doomed); err != nil {
		return eventstore.PruneResult{}, true, err
	}
	if r.Partitions, err = res.RowsAffected(); err != nil {
		return eventstore.PruneResult{}, true, err
	}
	return r, true, nil
}

// PruneWhere implements eventstore.Admin.
func (s *Store) PruneWhere(ctx context.Context, f eventstore.StreamFilter, o eventstore.PruneOptions) (r eventstore.PruneResult, err error) {
	if err := checkPruneWhere(f, o); err != nil {
		return eventstore.PruneResult{}, err
	}
	err = s.run(ctx, "prune where", "", func(tx *sqlx.Tx) error {
		r, err = pruneWhere(ctx, tx, f, o)
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
		r, err = pruneWhere(ctx, tx, f, o)
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

func pruneWhere(ctx context.Context, tx *sqlx.Tx, f eventstore.StreamFilter, o eventstore.PruneOptions) (eventstore.PruneResult, error) {
	ids, err := listStreams(ctx, tx, f, true)
	if err != nil {
		return eventstore.PruneResult{}, err
	}
	var r eventstore.PruneResult
	for _, id := range ids {
		one, found, err := prune(ctx, tx, id, o)
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
	err := scanRow(ctx, q, qStats, []any{stream}, &st.Partition, &st.Events, &st.EventBytes)
	if errors.Is(err, sql.ErrNoRows) {
		return eventstore.Stats{}, eventstore.NotFound(op, stream)
	}
	if err != nil {
		return eventstore.Stats{}, wrap(op, stream, err)
	}
	kv, err := s.kvMerged(ctx, q, stream)
	if err != nil {
		return eventstore.Stats{}, wrap(op, stream, err)
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
	if err := scanRow(ctx, q, qTotalStreams, nil, &t.Streams); err != nil {
		return eventstore.Totals{}, wrap(op, "", err)
	}
	if err := scanRow(ctx, q, qTotalPartitions, nil, &t.Partitions, &t.Events); err != nil {
		return eventstore.Totals{}, wrap(op, "", err)
	}
	rows, err := q.QueryContext(ctx, qTotalsByStatus)
	if err != nil {
		return eventstore.Totals{}, wrap(op, "", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			status string
			n      int64
		)
		if err := rows.Scan(&status, &n); err != nil {
			return eventstore.Totals{}, wrap(op, "", err)
		}
		t.ByStatus[eventstore.Status(status)] = n
	}
	return t, wrap(op, "", rows.Err())
}
