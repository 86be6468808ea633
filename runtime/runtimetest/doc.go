// Package runtimetest helps people who write orchestrations test them.
//
// An Env runs orchestrations on the real runtime over an in-memory provider with a
// virtual clock: activities can be stubbed by name, events raised at virtual times,
// and time jumps to the next timer whenever everything waits, so a test of a 24-hour
// timer takes milliseconds. History returns what the execution recorded.
//
// Export, WriteHistories and ReadHistories move recorded executions between a
// database and JSON files (`duroq export` writes them), and ReplayExecutions
// replays them against the current code with runtime.Replay: a replay test over
// histories recorded in production tells, before deploying, whether a code change
// would break the instances already running.
package runtimetest
