package postgres

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/jmoiron/sqlx"
)

// maxPlanRounds bounds lockedPlan's rounds; each round finds streams that joined
// the plan since the previous one (or were deleted and created again while it
// locked them). Under the churn of TestConcurrentWritersAcrossProcesses (16 writers
// deleting and recreating 4 streams) a round more was needed about a third as often
// as the round before it (in 12 runs, 251 plans went to a third round, 87 to a
// fourth, ... one to a ninth and on to an eleventh), so 8 rounds failed a delete in
// about one run of 12; 32 make that chance negligible and cost only under such
// contention.
const maxPlanRounds = 32

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
