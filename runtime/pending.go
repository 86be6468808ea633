package runtime

import (
	"context"
	"fmt"

	"github.com/duroq/duroq/runtime/provider"
)

// abandonOrchestration gives an orchestration item back (see
// Provider.AbandonOrchestrationItem), recording reason where the provider can keep it
// (ReasonAbandoner) so that Status of a start that never ran says why.
func abandonOrchestration(ctx context.Context, p provider.Provider, token string, delay provider.Duration, ignoreAttempt bool, reason string) error {
	if ra, ok := p.(provider.ReasonAbandoner); ok {
		return ra.AbandonOrchestrationItemWithReason(ctx, token, delay, ignoreAttempt, reason)
	}
	return p.AbandonOrchestrationItem(ctx, token, delay, ignoreAttempt)
}

// unstartedStatus is the status of an instance whose history read empty: Pending
// when p shows a start queued for it, else NotFound. When the instance's first turn
// committed since that read, it returns the history instead, read again.
func unstartedStatus(ctx context.Context, p provider.Provider, instance string) (OrchestrationStatus, []provider.Event, error) {
	st := OrchestrationStatus{State: StateNotFound}
	r, ok := p.(provider.PendingStartReader)
	if !ok {
		return st, nil, nil
	}
	ps, err := r.PendingStart(ctx, instance)
	if err != nil {
		return st, nil, fmt.Errorf("pending start: %w", err)
	}
	if ps == nil {
		// A first turn consumes the start and writes the history together, so a
		// start the queue no longer shows is in the history if it ran.
		events, err := p.Read(ctx, instance)
		return st, events, err
	}
	st.State, st.Name, st.Version = StatePending, ps.Name, ps.Version
	if ps.LastError != "" {
		times := "times"
		if ps.Attempts == 1 {
			times = "time"
		}
		st.PendingReason = fmt.Sprintf("%s (offered %d %s)", clip(ps.LastError, maxReasonBytes), ps.Attempts, times)
	}
	return st, nil, nil
}
