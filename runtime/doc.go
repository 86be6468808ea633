// Package runtime is duroq's durable-execution runtime: the API orchestrations and
// activities are written against, the Runtime that runs them and the Client that
// starts, signals and inspects them. The storage contract it runs on is package
// runtime/provider.
//
// Orchestrations are plain Go functions of a *Context, replayed deterministically
// from their history on every turn (RunTurn, a pure engine: the function runs as a
// coroutine, decisions are matched positionally against history, and a mismatch
// fails the orchestration with a Configuration/Nondeterminism error naming it).
// Activities are functions of an *ActivityContext run by workers, at least once. A
// Runtime runs both over a Provider; a Client starts, signals and inspects instances.
//
//	reg := runtime.NewRegistry()
//	reg.RegisterActivity("Greet", func(ctx *runtime.ActivityContext, name string) (string, error) { return "Hello, " + name, nil })
//	reg.RegisterOrchestration("Hello", func(ctx *runtime.Context, in string) (string, error) {
//		return ctx.ScheduleActivity("Greet", in).Get()
//	})
//	rt, _ := runtime.New(p, reg, runtime.Options{}) // p: sqliteprovider.Open(...), adapter.NewMemory(...)
//	go rt.Run(ctx)
//	rt.Client().StartOrchestration(ctx, "hello-1", "Hello", "duroq")
//
// The runtime needs a provider.Provider (package runtime/provider): two peek-lock
// queues and an append-only history per execution, the Go shape of duroxide's
// provider trait. Package adapter implements it over an mq.MessageQueue and an
// eventstore.EventStore; conformance.TestRuntime runs the end-to-end scenarios below
// on any provider. A history is a []provider.Event (Replay, runtimetest.History).
//
// Options.TracerProvider traces every turn and activity through OpenTelemetry's
// API, each span a child of what caused it; the trace context travels in work items
// and history, so a trace follows an orchestration across processes. Without it
// nothing is recorded.
//
// # Feature map
//
// Every feature of duroxide's orchestration API (its feature table §2.1–2.6) and its
// Go counterpart, with a test that exercises it. Scenario names are subtests of
// conformance.TestRuntime (run on memory, SQLite and PostgreSQL by package adapter);
// Test* names are unit tests of this package.
//
// Orchestration context (§2.1):
//
//	schedule_activity                 Context.ScheduleActivity             Basics/HelloWorld, Basics/SequentialActivities
//	schedule_activity_typed           ActivityDef.Schedule (JSON edge)     Example, cmd/duroq TestDemoCompletesEveryOrder
//	schedule_activity_on_session      OnSession option                     SessionsTagsKVRetry/SessionAffinityAcrossTwoRuntimes
//	DurableFuture::with_tag           WithTag option                       SessionsTagsKVRetry/TaggedActivityRunsOnMatchingWorker, TagLengthLimit
//	schedule_activity_with_retry      ScheduleActivityWithRetry, RetryPolicy SessionsTagsKVRetry/Retry*, TestBackoff*
//	schedule_timer                    CreateTimer                          TimersEvents/SingleTimerFires, TimerFiresAtCorrectTimeAfterPreviousTimer
//	schedule_wait (positional)        WaitForEvent                         TimersEvents/PositionalMatchingFIFO, CancelledSubscriptionDoesNotStealFutureEvent
//	dequeue_event (FIFO mailbox)      DequeueEvent                         TimersEvents/Queue*, ContinueAsNewVersioning/ContinueAsNewCarriesStatusKVAndQueue
//	schedule_sub_orchestration*       ScheduleSubOrchestration (+WithInstanceID, WithVersion)  SubOrchestrations/Basic, FanOut, Chained, VersionedChild, AutoIDsUniqueAcrossContinueAsNew
//	schedule_orchestration (detached) StartOrchestration                   SubOrchestrations/DetachedStart, DetachedStartWhenParentCompletesSameTurn
//	continue_as_new[_versioned]       ContinueAsNew, ContinueAsNewVersioned ContinueAsNewVersioning/ContinueAsNewCounter, ContinueAsNewUpgradesToLatest
//	join                              Join (any number)                    Basics/FanOut1000, TestFanOutJoinIsLinear
//	select2/select3                   Select (any number; losers cancelled) TimersEvents/TimerRaceCancelsLosingActivity, SubOrchestrations/SelectLoserChildIsCancelled
//	cancellation of unobserved futures Select losers, execution end        CancellationPoison/SelectLoserActivityCancelled, SubOrchestrations/ParentEndingCancelsUnawaitedChild
//	set/reset/get_custom_status       SetCustomStatus, ResetCustomStatus, CustomStatus  TimersEvents/CustomStatus*
//	KV set/get/clear/all/keys/length  SetKV, KV, ClearKV, ClearAllKV, KVAll, KVKeys  SessionsTagsKVRetry/KVBasicsAndClientReads, KVReadModifyWriteAcrossContinueAsNew
//	prune_kv_values_updated_before    PruneKVUpdatedBefore                 SessionsTagsKVRetry/KVPruneUpdatedBefore
//	get_kv_value_from_instance        KVFromInstance (built-in activity)   SessionsTagsKVRetry/KVFromInstance
//	new_guid, utc_now                 NewGUID, Now (deterministic, no activity needed)  Basics/DeterministicHelpers
//	trace_*                           Logger (silent while replaying)      TestReplaySafeLogging
//	is_replaying, metadata            IsReplaying, InstanceID, ExecutionID, Name, Version  Basics/ContextMetadata
//
// Activities (§2.2):
//
//	ActivityContext accessors         ActivityContext (InstanceID, ActivityID, SessionID, Tag, WorkerID, Attempt, Client)  Basics/ContextMetadata
//	cooperative cancellation          ActivityContext is a context.Context  CancellationPoison/CancelRunningInstance, ActivityAbortedAfterCancellationGrace
//	automatic lock renewal            Options.WorkerLockTimeout, LockRenewalBuffer  CancellationPoison/LongRunningActivityWithLockRenewal
//	sessions, worker node id, cap     Options.WorkerNodeID, MaxSessionsPerRuntime, Session*  SessionsTagsKVRetry/Session*
//	tag filters                       Options.WorkerTags                   SessionsTagsKVRetry/Tag*
//	unregistered activity backoff     Options.UnregisteredBackoff          ContinueAsNewVersioning/RollingDeploymentUnregisteredActivity
//	poison                            Options.MaxAttempts                  CancellationPoison/PoisonActivityFailsOrchestration, ContinueAsNewVersioning/UnknownActivityFailsWithPoison
//
// Registries and versioning (§2.3):
//
//	register / duplicates / reserved  Registry.RegisterActivity, RegisterOrchestration, ReservedPrefix  TestRegistry*
//	versions, Latest/Exact policy     RegisterOrchestrationVersion, SetVersionPolicy  ContinueAsNewVersioning/StartUsesLatestOrExplicitVersion, PolicyExactPinsStart
//	version pinned on replay          version from OrchestrationStarted    ContinueAsNewVersioning/CompletionOnlyReplayUsesHistoryVersion
//	unregistered orchestration        backoff, then poison                 ContinueAsNewVersioning/RollingDeploymentUnregisteredOrchestration, UnknownOrchestrationFailsWithPoison
//	capability filtering              Options.RuntimeVersion, SupportedVersions  ContinueAsNewVersioning/CapabilityFilterSkipsNewerPins, CapabilityRangesRouteRuntimes
//
// Runtime lifecycle (§2.4):
//
//	start / options / shutdown        New, Run, Shutdown (drain, then cancel)  CancellationPoison/ShutdownDrainsInFlightActivity, ShutdownPastDrainTimeoutHandsActivityOn, RunTwiceIsRefused
//	orchestrator lock renewal         Options.OrchestratorLockTimeout      CancellationPoison/OrchestrationLockRenewalPreventsExpiration
//	state cache between turns         Options.StateCacheSize (suspended code kept, LRU; replay on any mismatch)  every scenario under StateCache/ and NoStateCache/, TestStateCache*
//	poison orchestration              Options.MaxAttempts                  CancellationPoison/PoisonOrchestrationFails, CustomMaxAttemptsRespected
//	panics become failures            engine recovers                      Basics/PanicsBecomeFailures, ActivityPanicIsAnActivityFailure
//	terminal handling, idempotent start collisions answered              Basics/StartIsIdempotent, SubOrchestrations/ExplicitIDCollidesWith*
//	CancelInstance cascade            Client.CancelInstance                SubOrchestrations/CancelParentCascadesToChildren
//	nondeterminism                    positional matching                  CancellationPoison/CodeSwapTriggersNondeterminism, TestChangedCodeFailsWithNondeterminism
//	crash recovery                    durable store, lock expiry           Crash/ChildKilledMidRunIsResumedByAnother, cmd/duroq TestDemoResumesAfterKill9
//
// Production robustness (duroq; duroxide has no counterpart for most of it):
//
//	code that blocks                  Options.TurnTimeout (turn given up, others go on; fails after MaxAttempts)  Isolation/BlockingTurnDoesNotStallOthers, BlockingCodeFailsAfterMaxAttempts
//	bounded stop                      Run returns within DrainTimeout + 1 s; closed provider ends Run  Isolation/ActivityIgnoringCancellationDoesNotHoldRun, ClosedProviderStopsRun
//	unstorable results fail at once   failed completion / LimitExceeded with the provider's reason  Isolation/UnstorableOutputFailsAtOnce, FailFast/OversizedActivityResultFailsAfterOneRun
//	panic stacks, poison reasons      ErrorDetails.Stack, ErrorDetails.Message  FailFast/*Panic*, PoisonActivitySaysWhy, Isolation/UnregisteredFailsWithItsReason
//	started but not run yet           StatePending, PendingReason (PendingStartReader, ReasonAbandoner)  Pending/*
//	transient provider faults         waits retry; lost commit replies checked against history  Faults/*, package faultprovider
//	other processes' commits          ChangeNotifier (SQLite: a file watcher); InstanceWatcher (PostgreSQL: a signal per instance; SQLite: one read of the watched instances per change)  CrossProcess/WakeUpLatency
//
// Client (§2.5):
//
//	start[_versioned]                 Client.StartOrchestration[Versioned], OrchestrationDef.Start  Basics/*, ContinueAsNewVersioning/StartUsesLatestOrExplicitVersion
//	raise_event / enqueue_event       RaiseEvent, EnqueueEvent             TimersEvents/PositionalMatchingFIFO, QueueFIFOOrdering
//	cancel_instance                   CancelInstance                       CancellationPoison/Cancel*
//	get_orchestration_status          Status (NotFound/Pending/Running/Completed/Failed + custom status)  Basics/StatusNotFound, Pending/*, TimersEvents/CustomStatusVisibleWhileRunningAndAfterCompletion
//	wait_for_orchestration            WaitForOrchestration (ctx deadline)  every scenario
//	wait_for_status_change            WaitForStatusChange                  TimersEvents/WaitForStatusChange
//	KV reads, wait_for_kv_value       KV, KVAll, WaitForKV                 SessionsTagsKVRetry/KVBasicsAndClientReads
//	get_orchestration_stats           Stats                                conformance.TestProvider InstanceStats cases
//
// Management (§2.6): Client.Admin returns the provider's ProviderAdmin (list, info,
// executions, metrics, queue depths, tree, delete with cascade, bulk delete, prune),
// checked by conformance.TestProvider's Management, Deletion, BulkDeletion and Prune
// groups and used by SubOrchestrations/Basic and ContinueAsNewVersioning/ContinueAsNewCounter.
//
// Decisions where duroxide differs or is silent: NewGUID and Now are computed by the
// engine from the instance, execution and history (deterministic without a built-in
// activity); auto child ids include the execution after the first one (duroxide
// #32); a start naming an existing instance of another parent fails the parent's
// future at once (#40); limits follow duroxide's later values (150 KV keys, 64 KiB
// per value, 100 carried-forward queue messages, 256 KiB custom status, 256-byte tags).
package runtime
