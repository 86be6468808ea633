// Package schedule fires durable schedules — cron expressions or fixed intervals —
// exactly once per slot across every process, by enqueueing a message or starting
// an orchestration. It is built on the mq contract alone, so it runs on every
// backend of this module (memory, SQLite, PostgreSQL) and in as many processes as
// share the queue.
//
// # Model
//
// A schedule is one message in a queue of its own (DefaultQueue,
// "duroq.schedules"): its message key and routing key are the schedule's id, so
// ids are unique, and its payload is the definition and the next slot to fire
// (JSON with a version field, readable with `duroq queues peek -payload`). The
// message is visible at that slot plus a random jitter. Manager creates, lists,
// updates, pauses, resumes and deletes schedules; Scheduler consumes the queue and
// fires them.
//
// A slot is an instant the schedule names. Its slot id is the schedule id, "@" and
// the slot in RFC 3339 UTC ("nightly@2026-01-02T03:00:00Z", see SlotID): every
// process computes the same one. An EnqueueTarget's message carries it as its
// message key (mq.Delivery.Key); an OrchestrationTarget's instance id is the slot
// id.
//
// # Exactly once
//
// The Scheduler that takes a due firing computes the slots to fire and, in one
// atomic mq Settle, acks the firing, enqueues the target messages and enqueues the
// schedule's next firing. Nothing is fired unless the schedule moves on in the
// same step, and the firing's lock makes one Scheduler at a time its owner. A
// Scheduler that crashes before the Settle leaves the firing locked; once the lock
// lapses another takes it and fires the same slots. An orchestration is started
// before that Settle, with the slot id as instance id, so a firing taken twice
// starts the same instance twice, and the runtime ignores a start of an instance
// that exists. Deleting or pausing a schedule removes its message: a firing in
// progress then loses its lock and its Settle changes nothing, so it neither
// enqueues nor reschedules (an instance it already started stays started).
//
// # Catch-up, overlap, jitter
//
// When no Scheduler ran at a slot's time (downtime), the catch-up policy decides:
// CatchupSkip fires the latest passed slot only if it is at most Jitter +
// CatchupWindow late, CatchupOne (the default) fires the latest passed slot once,
// CatchupAll fires every passed slot, oldest first, up to MaxCatchup. The overlap
// policy of an orchestration target can skip a slot while the previous slot's
// instance still runs (OverlapSkip; SchedulerOptions.Running tells). Jitter
// delays a firing by a uniform random duration below Jitter; the slot, and its id,
// stay where they are.
//
// # Time zones and daylight saving
//
// A Cron schedule is read in its TimeZone (an IANA name; UTC by default) by
// github.com/robfig/cron/v3's parser and Next, which earns its place: a correct
// cron evaluator (ranges, steps, names, descriptors, day-of-month OR day-of-week,
// optional seconds, zones) is a lot of subtle code, and that one is small, has no
// dependencies and is the one most Go schedulers use. Around daylight saving
// changes it behaves as cron does: a time that does not exist that day (02:30
// when clocks jump from 02:00 to 03:00) is skipped that day, and a time that
// occurs twice (01:30 when clocks fall back from 02:00 to 01:00) fires twice, at
// two distinct instants and so two slot ids; "@hourly" fires once per real hour.
// Every schedules are absolute: Anchor + k·Every, unaffected by zones.
package schedule
