package mqsql

import (
	"time"

	"github.com/duroq/duroq/internal/limits"
	"github.com/duroq/duroq/mq"
)

// LimitRow is a row of mq_limits, the same in both dialects: a queue's limit (Group
// "") or a group's, and its rate's bucket. Times are Unix microseconds.
type LimitRow struct {
	Group       string  `db:"grp"`
	MaxInFlight int     `db:"max_in_flight"`
	Rate        int     `db:"rate"`
	Per         int64   `db:"per"`
	Tokens      float64 `db:"tokens"`
	RefilledAt  int64   `db:"refilled_at"`
}

// LimitColumns are the columns of a LimitRow, in the order NewLimitRow's Args
// gives them after the queue.
const LimitColumns = `grp, max_in_flight, rate, per, tokens, refilled_at`

// NewLimitRow is the row SetLimit stores for l at now: its bucket full.
func NewLimitRow(group string, l mq.Limit, now time.Time) LimitRow {
	return LimitRow{Group: group, MaxInFlight: l.MaxInFlight, Rate: l.Rate, Per: l.Per.Microseconds(),
		Tokens: float64(l.Rate), RefilledAt: now.UnixMicro()}
}

// Args are the row's values in LimitColumns order.
func (r LimitRow) Args() []any {
	return []any{r.Group, r.MaxInFlight, r.Rate, r.Per, r.Tokens, r.RefilledAt}
}

// Rules turns rows into the limiter's rules.
func Rules(rows []LimitRow) []limits.Rule {
	rules := make([]limits.Rule, len(rows))
	for i, r := range rows {
		rules[i] = limits.Rule{Group: r.Group, MaxInFlight: r.MaxInFlight, Rate: r.Rate, Per: time.Duration(r.Per) * time.Microsecond,
			Tokens: r.Tokens, Refilled: time.UnixMicro(r.RefilledAt)}
	}
	return rules
}

// HeldRow is a locked message as a limited dequeue counts it: its batch's token
// and its limit group ("" for none).
type HeldRow struct {
	Token string `db:"lock_token"`
	Group string `db:"grp"`
}

// Held turns rows into the limiter's view of the batches in flight.
func Held(rows []HeldRow) []limits.Held {
	held := make([]limits.Held, len(rows))
	for i, r := range rows {
		held[i] = limits.Held{Token: r.Token, Group: r.Group}
	}
	return held
}

// LimitInfos lists rows, ordered by group, as Admin.Limits reports them, with the
// batches held counts in flight at now.
func LimitInfos(rows []LimitRow, held []HeldRow, now time.Time) []mq.LimitInfo {
	b := limits.New(now, Rules(rows), Held(held))
	out := make([]mq.LimitInfo, len(rows))
	for i, r := range rows {
		out[i] = mq.LimitInfo{Group: r.Group, Limit: mq.Limit{MaxInFlight: r.MaxInFlight, Rate: r.Rate, Per: time.Duration(r.Per) * time.Microsecond},
			InFlight: b.InFlight(r.Group)}
	}
	return out
}
