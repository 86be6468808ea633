package provider

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Constants of the history model.
const (
	// InitialExecutionID is the id of an instance's first execution.
	InitialExecutionID uint64 = 1
	// InitialEventID is the id of an execution's first event.
	InitialEventID uint64 = 1
)

// Execution statuses, as stored and reported.
const (
	StatusRunning        = "Running"
	StatusCompleted      = "Completed"
	StatusFailed         = "Failed"
	StatusContinuedAsNew = "ContinuedAsNew"
)

// EventKind discriminates Event.
type EventKind string

// The event kinds of an orchestration history. The comment names the fields of
// Event each kind uses besides the common ones.
const (
	EventOrchestrationStarted            EventKind = "OrchestrationStarted"            // Name, Version, Input, ParentInstance, ParentID, ParentExecutionID, CarryForward, InitialCustomStatus
	EventOrchestrationCompleted          EventKind = "OrchestrationCompleted"          // Output
	EventOrchestrationFailed             EventKind = "OrchestrationFailed"             // Details
	EventOrchestrationContinuedAsNew     EventKind = "OrchestrationContinuedAsNew"     // Input
	EventOrchestrationCancelRequested    EventKind = "OrchestrationCancelRequested"    // Reason
	EventActivityScheduled               EventKind = "ActivityScheduled"               // Name, Input, SessionID, Tag
	EventActivityCompleted               EventKind = "ActivityCompleted"               // Result
	EventActivityFailed                  EventKind = "ActivityFailed"                  // Details
	EventActivityCancelRequested         EventKind = "ActivityCancelRequested"         // Reason
	EventTimerCreated                    EventKind = "TimerCreated"                    // FireAtMs
	EventTimerFired                      EventKind = "TimerFired"                      // FireAtMs
	EventExternalSubscribed              EventKind = "ExternalSubscribed"              // Name
	EventExternalEvent                   EventKind = "ExternalEvent"                   // Name, Data
	EventExternalSubscribedCancelled     EventKind = "ExternalSubscribedCancelled"     // Reason
	EventQueueSubscribed                 EventKind = "QueueSubscribed"                 // Name
	EventQueueEventDelivered             EventKind = "QueueEventDelivered"             // Name, Data
	EventQueueSubscriptionCancelled      EventKind = "QueueSubscriptionCancelled"      // Reason
	EventOrchestrationChained            EventKind = "OrchestrationChained"            // Name, Instance, Input, Version
	EventSubOrchestrationScheduled       EventKind = "SubOrchestrationScheduled"       // Name, Instance, Input, Version
	EventSubOrchestrationCompleted       EventKind = "SubOrchestrationCompleted"       // Result
	EventSubOrchestrationFailed          EventKind = "SubOrchestrationFailed"          // Details
	EventSubOrchestrationCancelRequested EventKind = "SubOrchestrationCancelRequested" // Reason
	EventCustomStatusUpdated             EventKind = "CustomStatusUpdated"             // Status (nil = cleared)
	EventKeyValueSet                     EventKind = "KeyValueSet"                     // Key, Value, LastUpdatedAtMs
	EventKeyValueCleared                 EventKind = "KeyValueCleared"                 // Key
	EventKeyValuesCleared                EventKind = "KeyValuesCleared"                // (none)
)

// NameData is a named payload (carried-forward queue messages).
type NameData struct {
	Name string `msgpack:"n"` // the queue the message was sent to (Client.EnqueueEvent's queue)
	Data string `msgpack:"d"` // the message
}

// Event is one entry of an execution's history. The kind decides which of the
// optional fields are meaningful (see the EventKind constants); the rest stay zero.
// Events are written by the runtime and stored verbatim by providers.
type Event struct {
	Kind          EventKind `msgpack:"k"`             // what happened; decides which fields below are meaningful
	EventID       uint64    `msgpack:"id"`            // 1-based per execution; providers store ids as given, unique per execution, without checking contiguity
	SourceEventID uint64    `msgpack:"src,omitempty"` // the scheduling event a completion answers; 0 = none
	InstanceID    string    `msgpack:"i,omitempty"`   // the instance whose history holds the event
	ExecutionID   uint64    `msgpack:"x,omitempty"`   // the execution whose history holds the event (1 for the first)
	TimestampMs   int64     `msgpack:"ts,omitempty"`  // when the turn that wrote it ran (Options.Now), in Unix milliseconds
	// RuntimeVersion is the semver of the runtime that wrote the event.
	RuntimeVersion string `msgpack:"rv,omitempty"`

	Name                string        `msgpack:"name,omitempty"` // the orchestration, activity, child, event or queue name, by Kind
	Version             string        `msgpack:"ver,omitempty"`  // the orchestration version run (Started) or asked for ("" = the registry's policy)
	Input               string        `msgpack:"in,omitempty"`   // the input of the orchestration, activity or child; ContinuedAsNew: the next execution's
	Output              string        `msgpack:"out,omitempty"`  // the orchestration's result (OrchestrationCompleted)
	Result              string        `msgpack:"res,omitempty"`  // the result of a completed activity or sub-orchestration
	Data                string        `msgpack:"data,omitempty"` // the payload of an external event or a queue message
	Reason              string        `msgpack:"why,omitempty"`  // why a cancellation was requested
	Instance            string        `msgpack:"inst,omitempty"` // child instance of a sub-orchestration or chained start
	ParentInstance      string        `msgpack:"pi,omitempty"`   // a sub-orchestration's parent instance ("" for a root)
	ParentID            uint64        `msgpack:"pid,omitempty"`  // the parent's SubOrchestrationScheduled event id
	ParentExecutionID   uint64        `msgpack:"px,omitempty"`   // the parent's execution that scheduled the child
	SessionID           string        `msgpack:"sess,omitempty"` // the session the activity runs on ("" = none)
	Tag                 string        `msgpack:"tag,omitempty"`  // the activity's routing tag ("" = untagged)
	FireAtMs            int64         `msgpack:"fire,omitempty"` // when the timer fires, in Unix milliseconds
	Details             *ErrorDetails `msgpack:"err,omitempty"`  // the failure of the *Failed kinds
	Status              *string       `msgpack:"cs,omitempty"`   // custom status; nil clears
	Key                 string        `msgpack:"key,omitempty"`  // the KV key set or cleared
	Value               string        `msgpack:"val,omitempty"`  // the KV value set
	LastUpdatedAtMs     int64         `msgpack:"kvts,omitempty"` // when the KV value was set (the turn's clock), in Unix milliseconds
	CarryForward        []NameData    `msgpack:"cf,omitempty"`   // queue messages the previous execution left unconsumed
	InitialCustomStatus *string       `msgpack:"ics,omitempty"`  // the custom status carried from the previous execution (nil: none)
	// TraceParent is, on OrchestrationStarted, the W3C traceparent of the span that
	// started the execution ("" = none): every turn of the execution is traced as
	// its child.
	TraceParent string `msgpack:"tp,omitempty"`
}

// IsTerminal reports whether the event ends its execution.
func (e *Event) IsTerminal() bool {
	switch e.Kind {
	case EventOrchestrationCompleted, EventOrchestrationFailed, EventOrchestrationContinuedAsNew:
		return true
	}
	return false
}

// EventField is one meaningful field of an event, named as tools show it.
type EventField struct {
	Name  string // "input", "result", "error", "fire_at", ...
	Value string // the field's text; times are RFC 3339 in UTC, to the millisecond
}

// Fields returns the meaningful fields of e besides its id, kind, name and time, in
// a fixed order, skipping empty ones: what the CLI and the web UI show of a history
// event.
func (e *Event) Fields() []EventField {
	var f []EventField
	add := func(name, value string) {
		if value != "" {
			f = append(f, EventField{name, value})
		}
	}
	if e.SourceEventID != 0 {
		add("source", strconv.FormatUint(e.SourceEventID, 10))
	}
	for _, kv := range [][2]string{{"instance", e.Instance}, {"version", e.Version}, {"input", e.Input}, {"output", e.Output},
		{"result", e.Result}, {"data", e.Data}, {"reason", e.Reason}, {"parent", e.ParentInstance}, {"session", e.SessionID},
		{"tag", e.Tag}, {"error", e.Details.DisplayMessage()}, {"key", e.Key}, {"value", e.Value}} {
		add(kv[0], kv[1])
	}
	if e.FireAtMs != 0 {
		add("fire_at", time.UnixMilli(e.FireAtMs).UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	}
	if e.Kind == EventCustomStatusUpdated {
		if e.Status == nil {
			add("status", "(cleared)")
		} else {
			add("status", *e.Status)
		}
	}
	if n := len(e.CarryForward); n > 0 {
		add("carried_messages", strconv.Itoa(n))
	}
	if e.InitialCustomStatus != nil {
		add("custom_status", *e.InitialCustomStatus)
	}
	return f
}

// WorkItemKind discriminates WorkItem.
type WorkItemKind string

// The work item kinds. The comment names the queue and the fields each kind uses.
const (
	WorkStartOrchestration WorkItemKind = "StartOrchestration" // orchestrator: Instance, Name, Input, Version, ParentInstance, ParentID, ParentExecutionID, ExecutionID
	WorkActivityExecute    WorkItemKind = "ActivityExecute"    // worker: Instance, ExecutionID, ID, Name, Input, SessionID, Tag
	WorkActivityCompleted  WorkItemKind = "ActivityCompleted"  // orchestrator: Instance, ExecutionID, ID, Result
	WorkActivityFailed     WorkItemKind = "ActivityFailed"     // orchestrator: Instance, ExecutionID, ID, Details
	WorkTimerFired         WorkItemKind = "TimerFired"         // orchestrator, visible at FireAtMs: Instance, ExecutionID, ID, FireAtMs
	WorkExternalRaised     WorkItemKind = "ExternalRaised"     // orchestrator: Instance, Name, Data
	WorkQueueMessage       WorkItemKind = "QueueMessage"       // orchestrator: Instance, Name, Data
	WorkSubOrchCompleted   WorkItemKind = "SubOrchCompleted"   // orchestrator of ParentInstance: ParentInstance, ParentExecutionID, ParentID, Result
	WorkSubOrchFailed      WorkItemKind = "SubOrchFailed"      // orchestrator of ParentInstance: ParentInstance, ParentExecutionID, ParentID, Details
	WorkCancelInstance     WorkItemKind = "CancelInstance"     // orchestrator: Instance, Reason
	WorkContinueAsNew      WorkItemKind = "ContinueAsNew"      // orchestrator: Instance, Name, Input, Version, CarryForward, InitialCustomStatus, Parent*
)

// WorkItem is a message of the orchestrator or worker queue. The kind decides which
// fields are meaningful (see the WorkItemKind constants).
type WorkItem struct {
	Kind                WorkItemKind  `msgpack:"k"`              // what the item asks for; decides which fields below are meaningful
	Instance            string        `msgpack:"i,omitempty"`    // the instance the item is for (a sub-orchestration reply: the child; see TargetInstance)
	ExecutionID         uint64        `msgpack:"x,omitempty"`    // the execution that scheduled an activity or timer (replies for another are dropped); 1 for a start
	ID                  uint64        `msgpack:"id,omitempty"`   // the scheduling event id (activity, timer)
	Name                string        `msgpack:"name,omitempty"` // the orchestration, activity, event or queue name, by Kind
	Version             string        `msgpack:"ver,omitempty"`  // "" = unspecified
	Input               string        `msgpack:"in,omitempty"`   // the input of the orchestration or activity
	Result              string        `msgpack:"res,omitempty"`  // the result of a completed activity or sub-orchestration
	Data                string        `msgpack:"data,omitempty"` // the payload of an external event or a queue message
	Reason              string        `msgpack:"why,omitempty"`  // why the cancellation is asked for
	ParentInstance      string        `msgpack:"pi,omitempty"`   // a sub-orchestration's parent (its start, and the target of its reply)
	ParentID            uint64        `msgpack:"pid,omitempty"`  // the parent's SubOrchestrationScheduled event id
	ParentExecutionID   uint64        `msgpack:"px,omitempty"`   // the parent's execution that scheduled the child
	SessionID           string        `msgpack:"sess,omitempty"` // the session the activity runs on ("" = none)
	Tag                 string        `msgpack:"tag,omitempty"`  // the activity's routing tag ("" = untagged)
	FireAtMs            int64         `msgpack:"fire,omitempty"` // when the timer fires, in Unix milliseconds
	Details             *ErrorDetails `msgpack:"err,omitempty"`  // the failure of ActivityFailed and SubOrchFailed
	CarryForward        []NameData    `msgpack:"cf,omitempty"`   // unconsumed queue messages for the next execution, at most MaxCarryForward
	InitialCustomStatus *string       `msgpack:"ics,omitempty"`  // the custom status for the next execution (nil: none)
	// TraceParent is the W3C traceparent of the span that sent the item ("" =
	// none): a start's becomes its execution's, an activity is traced as its child.
	TraceParent string `msgpack:"tp,omitempty"`
}

// TargetInstance is the instance whose orchestrator queue the item belongs to: the
// parent for sub-orchestration completions, else Instance.
func (w *WorkItem) TargetInstance() string {
	if w.Kind == WorkSubOrchCompleted || w.Kind == WorkSubOrchFailed {
		return w.ParentInstance
	}
	return w.Instance
}

// ErrorKind is the category of an ErrorDetails.
type ErrorKind string

// Error categories.
const (
	ErrorInfrastructure ErrorKind = "Infrastructure" // Operation, Message, Retryable
	ErrorConfiguration  ErrorKind = "Configuration"  // ConfigKind, Resource, Message
	ErrorApplication    ErrorKind = "Application"    // AppKind, Message, Retryable, Reason (Cancelled), Stack (Panicked)
	ErrorPoison         ErrorKind = "Poison"         // AttemptCount, MaxAttempts, PoisonType, Instance, ExecutionID, ActivityName, ActivityID, Message
)

// Sub-kinds of ErrorDetails.
const (
	ConfigNondeterminism = "Nondeterminism"
	ConfigLimitExceeded  = "LimitExceeded"

	AppActivityFailed      = "ActivityFailed"
	AppOrchestrationFailed = "OrchestrationFailed"
	AppPanicked            = "Panicked"
	AppCancelled           = "Cancelled"

	PoisonOrchestration         = "Orchestration"
	PoisonActivity              = "Activity"
	PoisonFailedDeserialization = "FailedDeserialization"
)

// ErrorDetails describes a failure recorded in history or sent in a work item.
type ErrorDetails struct {
	Kind         ErrorKind `msgpack:"k"`               // the category; decides which fields below are meaningful
	Message      string    `msgpack:"msg,omitempty"`   // what went wrong, for humans (Poison: why the last attempt failed, when known)
	Retryable    bool      `msgpack:"retry,omitempty"` // whether trying again may succeed (duroxide's; the runtime does not set it)
	Operation    string    `msgpack:"op,omitempty"`    // the failing operation of an Infrastructure error (the runtime produces none)
	ConfigKind   string    `msgpack:"ck,omitempty"`    // ConfigNondeterminism or ConfigLimitExceeded
	Resource     string    `msgpack:"res,omitempty"`   // what a Configuration error is about (duroxide's; the runtime does not set it)
	AppKind      string    `msgpack:"ak,omitempty"`    // AppActivityFailed, AppOrchestrationFailed, AppPanicked or AppCancelled
	Reason       string    `msgpack:"why,omitempty"`   // the cancellation's reason (AppCancelled)
	AttemptCount uint32    `msgpack:"att,omitempty"`   // how many times the poisoned message was fetched
	MaxAttempts  uint32    `msgpack:"max,omitempty"`   // the limit it exceeded (Options.MaxAttempts)
	PoisonType   string    `msgpack:"pt,omitempty"`    // PoisonOrchestration, PoisonActivity or PoisonFailedDeserialization
	Instance     string    `msgpack:"i,omitempty"`     // the poisoned instance
	ExecutionID  uint64    `msgpack:"x,omitempty"`     // the poisoned execution
	ActivityName string    `msgpack:"an,omitempty"`    // the poisoned activity's name (PoisonActivity)
	ActivityID   uint64    `msgpack:"aid,omitempty"`   // the poisoned activity's scheduling event id (PoisonActivity)
	Error        string    `msgpack:"e,omitempty"`     // the decode error of FailedDeserialization
	// Stack is where a panic happened: the panicking code's frames, innermost first,
	// bounded (Panicked failures only).
	Stack string `msgpack:"st,omitempty"`
}

// DisplayMessage renders the failure for humans and for an execution's output; a
// panic's stack follows on the next lines.
func (d *ErrorDetails) DisplayMessage() string {
	if d == nil {
		return ""
	}
	if d.Stack != "" {
		return d.summary() + "\n" + d.Stack
	}
	return d.summary()
}

// summary is DisplayMessage without the stack.
func (d *ErrorDetails) summary() string {
	switch d.Kind {
	case ErrorInfrastructure:
		return fmt.Sprintf("infrastructure error in %s: %s", d.Operation, d.Message)
	case ErrorConfiguration:
		msg := fmt.Sprintf("configuration error: %s", strings.ToLower(d.ConfigKind))
		if d.Resource != "" {
			msg += " (" + d.Resource + ")"
		}
		if d.Message != "" {
			msg += ": " + d.Message
		}
		return msg
	case ErrorPoison:
		switch d.PoisonType {
		case PoisonFailedDeserialization:
			return fmt.Sprintf("poison: history deserialization failed for %s execution %d: %s", d.Instance, d.ExecutionID, d.Error)
		case PoisonActivity:
			return withReason(fmt.Sprintf("poison: activity %s (id %d) exceeded %d attempts (%d)", d.ActivityName, d.ActivityID, d.MaxAttempts, d.AttemptCount), d.Message)
		default:
			return withReason(fmt.Sprintf("poison: orchestration %s exceeded %d attempts (%d)", d.Instance, d.MaxAttempts, d.AttemptCount), d.Message)
		}
	default:
		switch d.AppKind {
		case AppCancelled:
			return "canceled: " + d.Reason
		case AppPanicked:
			return "panic: " + d.Message
		}
		return d.Message
	}
}

// withReason appends reason, when there is one, to msg.
func withReason(msg, reason string) string {
	if reason == "" {
		return msg
	}
	return msg + ": " + reason
}

// SemVer is a semantic version (the runtime version that pins an execution).
type SemVer struct {
	Major, Minor, Patch uint32 // the three numbers of MAJOR.MINOR.PATCH (Ordinal keeps 20 bits of Minor and Patch)
}

// ParseSemVer parses "MAJOR.MINOR.PATCH" (a pre-release or build suffix after '-' or
// '+' is ignored).
func ParseSemVer(s string) (SemVer, error) {
	core, _, _ := strings.Cut(s, "-")
	core, _, _ = strings.Cut(core, "+")
	parts := strings.Split(core, ".")
	var nums [3]uint32
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 20)
		if len(parts) != 3 || err != nil {
			return SemVer{}, fmt.Errorf("runtime: parse version %q: want MAJOR.MINOR.PATCH", s)
		}
		nums[i] = uint32(n)
	}
	return SemVer{Major: nums[0], Minor: nums[1], Patch: nums[2]}, nil
}

// MustSemVer is ParseSemVer for constants; it panics on a malformed version.
func MustSemVer(s string) SemVer {
	v, err := ParseSemVer(s)
	if err != nil {
		panic(err)
	}
	return v
}

// String returns the version as "MAJOR.MINOR.PATCH".
func (v SemVer) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Ordinal maps the version to an integer that preserves version order (20 bits of
// minor and patch, the rest major), so stores can compare versions in SQL.
func (v SemVer) Ordinal() int64 {
	return int64(v.Major)<<40 | int64(v.Minor&0xFFFFF)<<20 | int64(v.Patch&0xFFFFF)
}

// SemVerRange is an inclusive range of versions.
type SemVerRange struct {
	Min, Max SemVer // the lowest and the highest version in the range
}

// CapabilityFilter restricts which executions a dispatcher may process, by the
// runtime version each execution is pinned to. Executions with no pin always pass.
// A filter with no ranges passes nothing. Providers may honour only the first range.
type CapabilityFilter struct {
	// SupportedVersions are the pins that pass: a pinned execution passes when its
	// version is in one of the ranges.
	SupportedVersions []SemVerRange
}

// TagMode is the kind of a TagFilter.
type TagMode uint8

// The five tag filters; TagDefaultOnly is the zero value, as in duroxide.
const (
	TagDefaultOnly TagMode = iota // only untagged activities
	TagOnly                       // only activities with one of Tags
	TagDefaultAnd                 // untagged activities and those with one of Tags
	TagAny                        // every activity
	TagNone                       // no activity (orchestrator-only runtime)
)

// TagFilter selects the activities a worker fetches by tag. The zero value is
// DefaultOnly.
type TagFilter struct {
	Mode TagMode  // which activities pass; the zero value is TagDefaultOnly
	Tags []string // the tags of TagOnly and TagDefaultAnd
}

// SessionFetchConfig makes FetchWorkItem session-aware for one owner (worker node).
type SessionFetchConfig struct {
	OwnerID     string   // who claims and holds sessions (the runtime's Options.WorkerNodeID)
	LockTimeout Duration // the lease a claimed session gets (Options.SessionLockTimeout)
}

// ScheduledActivityIdentifier names one scheduled activity, for cancellation.
type ScheduledActivityIdentifier struct {
	Instance    string // the instance that scheduled the activity
	ExecutionID uint64 // the execution that scheduled it
	ActivityID  uint64 // its ActivityScheduled event id
}

// ExecutionMetadata is what the runtime tells the provider about an execution when it
// acks a turn. Nil fields leave the stored value unchanged.
type ExecutionMetadata struct {
	Status               *string // Completed, Failed or ContinuedAsNew when the turn ends the execution (Running is accepted and changes nothing)
	Output               *string // the ended execution's result, failure message, or (ContinuedAsNew) next input
	OrchestrationName    *string // the orchestration's name, set by an execution's first turn
	OrchestrationVersion *string // the orchestration version the execution runs, set by its first turn
	ParentInstanceID     *string // a sub-orchestration's parent ("" for a root), set by an execution's first turn
	// PinnedVersion, when set, overwrites the execution's pinned runtime version.
	PinnedVersion *SemVer
}

// KVValue is one entry of an instance's key-value state.
type KVValue struct {
	Value           string // the key's value
	LastUpdatedAtMs int64  // when it was set (the setting turn's clock), in Unix milliseconds
}

// OrchestrationItem is a locked batch of orchestrator messages of one instance, with
// the current execution's history.
type OrchestrationItem struct {
	Instance          string     // the locked instance
	OrchestrationName string     // from the instance's metadata, else its history, else a start in Messages
	ExecutionID       uint64     // the instance's current execution (1 for a new instance)
	Version           string     // found as OrchestrationName is ("" when unknown: the registry's policy picks)
	History           []Event    // of ExecutionID, ordered by EventID
	Messages          []WorkItem // in enqueue order
	// HistoryError is set, with History empty, when the stored history cannot be
	// decoded; the lock is held and the attempt counted all the same.
	HistoryError string
	// KVSnapshot is the KV state as of the end of the previous execution.
	KVSnapshot   map[string]KVValue
	LockToken    string // the lock's token: AckOrchestrationItem, AbandonOrchestrationItem and RenewOrchestrationItemLock take it
	AttemptCount uint32 // the largest attempt count of the batch's messages
}

// OrchestrationAck is what a turn commits with AckOrchestrationItem.
type OrchestrationAck struct {
	ExecutionID         uint64                        // the execution the turn ran; created if new and made current if the highest
	HistoryDelta        []Event                       // the turn's new events, appended to ExecutionID's history as given
	WorkerItems         []WorkItem                    // ActivityExecute items for the worker queue
	OrchestratorItems   []WorkItem                    // items for the orchestrator queue of each one's TargetInstance (TimerFired visible at FireAtMs)
	Metadata            ExecutionMetadata             // what changes in the execution's stored metadata
	CancelledActivities []ScheduledActivityIdentifier // worker items to delete, after the inserts (missing ones are ignored)
}

// WorkItemLease is a locked worker-queue item.
type WorkItemLease struct {
	Item         WorkItem // the ActivityExecute item
	LockToken    string   // the lock's token: AckWorkItem, AbandonWorkItem and RenewWorkItemLock take it
	AttemptCount uint32   // how many times the item was fetched, this fetch included (1 the first time)
}

// SystemStats describes one instance's current execution and state.
type SystemStats struct {
	HistoryEventCount uint64 // events in the current execution's history
	HistorySizeBytes  uint64 // the sum of their encoded sizes, in bytes
	QueuePendingCount uint64 // queue messages (EnqueueEvent) carried into the current execution by ContinueAsNew
	KVUserKeyCount    uint64 // keys of the instance's KV state
	KVTotalValueBytes uint64 // the sum of their values' lengths, in bytes
}
