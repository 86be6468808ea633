package adapter

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/runtime/provider"
)

// The limit groups of the adapter's messages (see mq.Message.LimitGroup): an
// activity's worker item is in its name's group, a start in startGroup, so that
// provider.Limiter's limits are the queues' group limits.
const (
	activityGroupPrefix = "activity/"
	startGroup          = "start"
)

var _ provider.Limiter = (*Provider)(nil)

// activityGroup is the limit group of the activities named name: none for a name
// no queue name can hold (too long, not UTF-8, with NUL bytes), which no limit
// can name either.
func activityGroup(name string) string {
	g := activityGroupPrefix + name
	if len(g) > mq.MaxNameSize || !utf8.ValidString(g) || strings.IndexByte(g, 0) >= 0 {
		return ""
	}
	return g
}

// SetActivityLimit implements provider.Limiter: the limit of the worker queue's
// group of the activity.
func (p *Provider) SetActivityLimit(ctx context.Context, name string, l provider.Limit) error {
	return p.setLimit(ctx, "set activity limit", p.workQ, activityGroupPrefix+name, l)
}

// SetStartLimit implements provider.Limiter: the limit of the orchestrator queue's
// group of starts.
func (p *Provider) SetStartLimit(ctx context.Context, l provider.Limit) error {
	return p.setLimit(ctx, "set start limit", p.orchQ, startGroup, l)
}

func (p *Provider) setLimit(ctx context.Context, op, queue, group string, l provider.Limit) error {
	a, ok := p.q.(mq.Admin)
	if !ok {
		return fmt.Errorf("adapter: %s: the %T queue does not implement mq.Admin", op, p.q)
	}
	return classify(op, a.SetLimit(ctx, queue, group, mq.Limit(l)))
}
