package runtime

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/duroq/duroq/runtime/provider"
)

// Typed helpers: payloads are opaque strings end to end; these encode typed inputs
// and outputs as JSON at the edge (a string is passed as is, so typed and untyped
// code interoperate).

// Encode turns v into a payload: a string as is, anything else as JSON.
func Encode[T any](v T) (string, error) {
	if s, ok := any(v).(string); ok {
		return s, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("runtime: encode %T: %w", v, err)
	}
	return string(b), nil
}

// Decode is the inverse of Encode.
func Decode[T any](payload string) (T, error) {
	var v T
	if p, ok := any(&v).(*string); ok {
		*p = payload
		return v, nil
	}
	if err := json.Unmarshal([]byte(payload), &v); err != nil {
		return v, fmt.Errorf("runtime: decode %T from %.64q: %w", v, payload, err)
	}
	return v, nil
}

// TypedFuture is a Future whose result decodes to T.
type TypedFuture[T any] struct{ *Future }

// Get waits for the result and decodes it.
func (f TypedFuture[T]) Get() (T, error) {
	s, err := f.Future.Get()
	if err != nil {
		var zero T
		return zero, err
	}
	return Decode[T](s)
}

// failedFuture is a future that is already failed (an input that cannot be encoded).
func failedFuture[T any](ctx *Context, err error) TypedFuture[T] {
	return TypedFuture[T]{&Future{e: ctx.e, done: true, err: err}}
}

// ActivityDef names an activity together with its input and output types.
type ActivityDef[In, Out any] struct {
	Name string // the name the activity is registered and scheduled under
}

// NewActivity returns the typed definition of activity name.
func NewActivity[In, Out any](name string) ActivityDef[In, Out] {
	return ActivityDef[In, Out]{Name: name}
}

// Register adds fn to r under the activity's name.
func (a ActivityDef[In, Out]) Register(r *Registry, fn func(ctx *ActivityContext, in In) (Out, error)) error {
	return r.RegisterActivity(a.Name, typedCode(fn))
}

// Schedule schedules the activity with in.
func (a ActivityDef[In, Out]) Schedule(ctx *Context, in In, opts ...ActivityOption) TypedFuture[Out] {
	s, err := Encode(in)
	if err != nil {
		return failedFuture[Out](ctx, err)
	}
	return TypedFuture[Out]{ctx.ScheduleActivity(a.Name, s, opts...)}
}

// ScheduleWithRetry schedules the activity with in, retried by policy.
func (a ActivityDef[In, Out]) ScheduleWithRetry(ctx *Context, in In, policy RetryPolicy, opts ...ActivityOption) TypedFuture[Out] {
	s, err := Encode(in)
	if err != nil {
		return failedFuture[Out](ctx, err)
	}
	return TypedFuture[Out]{ctx.ScheduleActivityWithRetry(a.Name, s, policy, opts...)}
}

// OrchestrationDef names an orchestration together with its input and output types.
type OrchestrationDef[In, Out any] struct {
	Name string // the name the orchestration is registered and started under
}

// NewOrchestration returns the typed definition of orchestration name.
func NewOrchestration[In, Out any](name string) OrchestrationDef[In, Out] {
	return OrchestrationDef[In, Out]{Name: name}
}

// typedCode adapts typed code (an activity or an orchestration) to payloads.
func typedCode[C any, In, Out any](fn func(ctx C, in In) (Out, error)) func(C, string) (string, error) {
	return func(ctx C, input string) (string, error) {
		in, err := Decode[In](input)
		if err != nil {
			return "", err
		}
		out, err := fn(ctx, in)
		if err != nil {
			return "", err
		}
		return Encode(out)
	}
}

// Register adds fn to r at DefaultVersion.
func (o OrchestrationDef[In, Out]) Register(r *Registry, fn func(ctx *Context, in In) (Out, error)) error {
	return r.RegisterOrchestration(o.Name, typedCode(fn))
}

// RegisterVersion adds fn to r at version.
func (o OrchestrationDef[In, Out]) RegisterVersion(r *Registry, version string, fn func(ctx *Context, in In) (Out, error)) error {
	return r.RegisterOrchestrationVersion(o.Name, version, typedCode(fn))
}

// Start starts instance with in.
func (o OrchestrationDef[In, Out]) Start(ctx context.Context, c *Client, instance string, in In) error {
	s, err := Encode(in)
	if err != nil {
		return fmt.Errorf("start %s: %w", instance, err)
	}
	return c.StartOrchestration(ctx, instance, o.Name, s)
}

// Wait waits for instance to end and decodes its output; a failed instance gives an
// *OrchestrationFailedError.
func (o OrchestrationDef[In, Out]) Wait(ctx context.Context, c *Client, instance string) (Out, error) {
	var zero Out
	st, err := c.WaitForOrchestration(ctx, instance)
	if err != nil {
		return zero, err
	}
	if st.State == StateFailed {
		return zero, &OrchestrationFailedError{Instance: instance, Details: st.Failure}
	}
	return Decode[Out](st.Output)
}

// ScheduleSub runs the orchestration as a sub-orchestration of ctx's.
func (o OrchestrationDef[In, Out]) ScheduleSub(ctx *Context, in In, opts ...SubOrchestrationOption) TypedFuture[Out] {
	s, err := Encode(in)
	if err != nil {
		return failedFuture[Out](ctx, err)
	}
	return TypedFuture[Out]{ctx.ScheduleSubOrchestration(o.Name, s, opts...)}
}

// OrchestrationFailedError is the error of waiting for an instance that failed.
type OrchestrationFailedError struct {
	Instance string                 // the instance waited for
	Details  *provider.ErrorDetails // why it failed (OrchestrationStatus.Failure)
}

// Error names the instance and renders the failure (DisplayMessage).
func (e *OrchestrationFailedError) Error() string {
	return "orchestration " + e.Instance + " failed: " + e.Details.DisplayMessage()
}

// WaitForEventOf is WaitForEvent with the event's data decoded to T.
func WaitForEventOf[T any](ctx *Context, name string) TypedFuture[T] {
	return TypedFuture[T]{ctx.WaitForEvent(name)}
}

// DequeueEventOf is DequeueEvent with the message decoded to T.
func DequeueEventOf[T any](ctx *Context, queue string) TypedFuture[T] {
	return TypedFuture[T]{ctx.DequeueEvent(queue)}
}

// RaiseEventOf raises an event with data encoded.
func RaiseEventOf[T any](ctx context.Context, c *Client, instance, name string, data T) error {
	s, err := Encode(data)
	if err != nil {
		return fmt.Errorf("raise event %s: %w", instance, err)
	}
	return c.RaiseEvent(ctx, instance, name, s)
}

// EnqueueEventOf enqueues a queue message with data encoded.
func EnqueueEventOf[T any](ctx context.Context, c *Client, instance, queue string, data T) error {
	s, err := Encode(data)
	if err != nil {
		return fmt.Errorf("enqueue event %s: %w", instance, err)
	}
	return c.EnqueueEvent(ctx, instance, queue, s)
}
