package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

// ErrNondeterminism reports orchestration code that, replayed against a recorded
// history, does not take the decisions the history recorded: a code change that would
// break the instances already running it.
var ErrNondeterminism = errors.New("runtime: nondeterminism")

// Replay re-runs the code reg has for one recorded execution (the events of an
// execution, in order, as ProviderAdmin.ReadHistoryWithExecutionID returns them)
// and checks that it takes exactly the recorded decisions, nothing more:
//   - an ended execution must end the same way (same output, continue-as-new input or
//     failure message; failures the runtime imposed, such as poison or a blocked turn,
//     are not re-derived);
//   - a running one must decide nothing beyond its history, since the runtime records
//     every decision of a turn when it commits the turn.
//
// It returns nil when the code agrees with the history; an error matching
// ErrNondeterminism that names the first difference when it does not; ErrNotFound
// when reg lacks the orchestration at the execution's pinned version; ErrInvalid for
// a history that cannot be replayed. Code that blocks is given up when ctx ends (its
// goroutine cannot be stopped and is left behind).
func Replay(ctx context.Context, reg *Registry, history []provider.Event) error {
	const op = "replay"
	if len(history) == 0 {
		return fmt.Errorf("%s: %w: empty history", op, provider.ErrInvalid)
	}
	start := &history[0]
	if start.Kind != provider.EventOrchestrationStarted {
		return fmt.Errorf("%s: %w: history starts with %s, not OrchestrationStarted", op, provider.ErrInvalid, start.Kind)
	}
	for i := range history[:len(history)-1] {
		if history[i].IsTerminal() {
			return fmt.Errorf("%s: %w: event %d (%s) ends the execution but %d events follow it",
				op, provider.ErrInvalid, history[i].EventID, history[i].Kind, len(history)-1-i)
		}
	}
	fn, ok := reg.orchestration(start.Name, start.Version)
	if !ok {
		return fmt.Errorf("%s: %w: orchestration %q version %q is not registered", op, provider.ErrNotFound, start.Name, start.Version)
	}
	last := &history[len(history)-1]
	replayed, end := history, (*provider.Event)(nil)
	if last.IsTerminal() {
		replayed, end = history[:len(history)-1], last
	}
	turn := Turn{Instance: start.InstanceID, ExecutionID: start.ExecutionID, History: replayed,
		Now: time.UnixMilli(last.TimestampMs), RuntimeVersion: last.RuntimeVersion}
	done := make(chan TurnResult, 1)
	go func() { done <- RunTurn(turn, fn) }()
	var res TurnResult
	select {
	case res = <-done:
	case <-ctx.Done():
		return fmt.Errorf("%s of %s: the code did not yield: %w", op, describe(start), ctx.Err())
	}
	if f := res.Failure; f != nil && f.Kind == provider.ErrorConfiguration && f.ConfigKind == provider.ConfigNondeterminism {
		return fmt.Errorf("%s of %s: %w: %s", op, describe(start), ErrNondeterminism, f.Message)
	}
	if end != nil {
		if end.Kind == provider.EventOrchestrationFailed && end.Details != nil && end.Details.Kind != provider.ErrorApplication {
			return nil // imposed by the runtime (poison, a blocked turn, a limit): not the code's decision
		}
		if len(res.NewEvents) == 0 {
			return fmt.Errorf("%s of %s: %w: the code decides nothing where history recorded %s", op, describe(start), ErrNondeterminism, end.Kind)
		}
		if msg := endMismatch(end, &res.NewEvents[0]); msg != "" {
			return fmt.Errorf("%s of %s: %w: %s", op, describe(start), ErrNondeterminism, msg)
		}
		return nil
	}
	if len(res.NewEvents) > 0 {
		ev := &res.NewEvents[0]
		return fmt.Errorf("%s of %s: %w: after the recorded history the code decides %s%s, which the recorded run did not",
			op, describe(start), ErrNondeterminism, ev.Kind, quoted(ev.Name))
	}
	return nil
}

// endMismatch compares how the code ends now with how the recorded execution ended.
func endMismatch(rec, now *provider.Event) string {
	if msg := mismatch(rec, now); msg != "" {
		return msg
	}
	switch rec.Kind {
	case provider.EventOrchestrationCompleted:
		if rec.Output != now.Output {
			return fmt.Sprintf("the code now completes with output %s where history recorded %s", quote(now.Output), quote(rec.Output))
		}
	case provider.EventOrchestrationContinuedAsNew:
		if rec.Input != now.Input {
			return fmt.Sprintf("the code now continues as new with input %s where history recorded %s", quote(now.Input), quote(rec.Input))
		}
	case provider.EventOrchestrationFailed:
		if rec.Details != nil && now.Details != nil && rec.Details.Message != now.Details.Message {
			return fmt.Sprintf("the code now fails with %s where history recorded %s", quote(now.Details.Message), quote(rec.Details.Message))
		}
	}
	return ""
}

func describe(start *provider.Event) string {
	return fmt.Sprintf("instance %q execution %d (%s %s)", start.InstanceID, start.ExecutionID, start.Name, start.Version)
}

func quoted(name string) string {
	if name == "" {
		return ""
	}
	return " " + quote(name)
}

// quote quotes s, cut to a length an error message can carry.
func quote(s string) string { return fmt.Sprintf("%q", clip(s, 200)) }
