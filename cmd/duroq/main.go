// Command duroq runs duroq's demos and tools.
//
//	duroq demo [-db path | postgres://...] [-schema name] [-orders N] [-work d] [-workers N] [-fresh] [-otel stdout|otlp] [-otel-endpoint URL]
//	duroq bench <seq|fanout|timers|events|queue> [-backend sqlite|sqlite-memory|postgres] [-n N] [-k K] ...
//	duroq queue-demo [-db path] [-customers N] [-events N] [-workers N]
//	duroq export -db <sqlite file | postgres://...> [-instance id]... [-orchestration name]... [-o file] [-batch N] [-quiet]
//	duroq instances <list|show|history|tree|cancel|raise|enqueue|delete|prune|stats> -db <sqlite file | postgres://...> [-schema name] [-json] ...
//	duroq queues <list|stats|peek|dead-letters|redrive|purge|pause|resume> -db <sqlite file | postgres://...> [-schema name] [-json] ...
//	duroq schedules <list|show|create|update|pause|resume|delete> -db <sqlite file | postgres://...> [-schema name] [-json] [-queue name] ...
//	duroq migrate <status|up> -db <sqlite file | postgres://...> [-schema name] [-json] [-check] [-create]
//	duroq migrate sql -backend sqlite|postgres [-line mq|eventstore]
//	duroq ui -db <sqlite file | postgres://...> [-schema name] [-addr 127.0.0.1:8080] [-read-only]
//
// demo runs an order workflow on the durable-execution runtime over an embedded
// SQLite file: every order reserves its items in parallel, charges a card, waits for
// an approval (an event raised while it waits, or a message in its approvals queue)
// or a durable timeout, ships in a sub-orchestration that packs items in parallel,
// waits a durable cooling-off timer and notifies the customer. It shows progress, the
// final statuses and how the approvals went (an event raised before the order waits
// is dropped). Killed mid-run (even with kill -9) and run
// again on the same file, it resumes every order where it was and completes it.
//
// export writes the recorded histories of a database's executions as JSON, for
// runtime/runtimetest's replayer: replaying them against changed code before
// deploying it tells whether the change would break the instances already running.
//
// instances lets an operator see and fix the instances stored in a database, as
// the runtime's management API (provider.ProviderAdmin) and Client allow: list them
// a page at a time with filters, show one (status, output or failure, custom status,
// executions), its history or its tree of sub-orchestrations; cancel it, raise an
// event or queue a message for it, delete it or prune its old executions (or, with
// -yes, every instance list's filters select, a page at a time); count what is
// stored. Tables are aligned for people; -json prints JSON for scripts. Long
// operations (bulk delete and prune, redrive, export) print their progress on
// standard error (-quiet: none); SIGINT or SIGTERM stops them between pages, and they
// report what was done and exit with status 130.
//
// queues does the same for the messages of a database's queues (the runtime's
// "orchestrator" and "worker", an application's queues and their dead-letter
// queues), as mq.Admin allows: list the queues with their counts, count one queue
// or routing key, peek at messages a page at a time without locking them, show a
// dead-letter queue's origins and errors, redrive dead letters, purge messages
// (which -yes must confirm), and pause a queue (its consumers, in every process,
// receive nothing while producers go on) and resume it.
//
// schedules manages the durable schedules (package schedule) that the
// applications sharing a database fire with their schedule.Scheduler: list them
// with their next slot and state, show one, create one that fires on a cron
// expression (-cron, -tz) or every interval (-every) with jitter and catch-up and
// overlap policies, and enqueues a message (-enqueue) or starts an orchestration
// (-start) each time; pause, resume and delete them.
//
// migrate is for those who apply duroq's migrations themselves, or check them before
// a deploy (the providers otherwise apply them when they open): status shows, per
// migration line (mq, eventstore), the version applied, the latest this build knows
// and the pending files, creating nothing (-check exits 1 when one is pending); up
// applies them (a missing SQLite file or schema only with -create); sql prints a
// backend's migration SQL in order, with the rows recording it, to apply by hand.
// instances, queues and export refuse a database where the migrations were never
// applied (a mistyped path or schema) rather than create duroq's tables there.
//
// ui serves the web UI (package ui) of a database on a loopback address: instances
// with filters and paging, an instance's history, tree, KV and failure, the queues
// and their dead letters, with cancel, raise, delete, redrive and the pause and
// resume of a queue confirmed on their own page (-read-only: none).
//
// queue-demo shows per-customer ordered processing on an embedded SQLite queue: a
// failed event is retried without being overtaken by the customer's later events, a
// poison event is dead-lettered with its reason, then redriven and handled; it checks
// that every customer's events were handled once each, in order.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "demo":
		err = demo(os.Args[2:], os.Stdout)
	case "bench":
		err = benchCmd(os.Args[2:], os.Stdout)
	case "queue-demo":
		err = queueDemo(os.Args[2:])
	case "export":
		err = exportCmd(os.Args[2:], os.Stdout)
	case "instances":
		err = instancesCmd(os.Args[2:], os.Stdout, os.Stderr)
	case "queues":
		err = queuesCmd(os.Args[2:], os.Stdout, os.Stderr)
	case "schedules":
		err = schedulesCmd(os.Args[2:], os.Stdout, os.Stderr)
	case "migrate":
		err = migrateCmd(os.Args[2:], os.Stdout, os.Stderr)
	case "ui":
		err = uiMain(os.Args[2:], os.Stdout, os.Stderr)
	case benchProcessCmd: // a process of `duroq bench -processes`, not for people
		err = benchProcess(os.Args[2:], os.Stdin, os.Stdout)
	case "help", "-h", "--help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "duroq: unknown command %q\n\n", os.Args[1])
		usage()
	}
	if ce := (*cmdError)(nil); errors.As(err, &ce) {
		fmt.Fprintln(os.Stderr, ce) // a complete message: "duroq instances show: ..."
		os.Exit(exitCode(ce))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "duroq:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: duroq <command> [flags]

commands:
  demo         run an order workflow (activities, timers, events, fan-out, sub-orchestrations) on embedded SQLite
  bench        measure a workload (seq, fanout, timers, events, queue) on a backend; see duroq bench -h
  queue-demo   run per-customer ordered processing on an embedded SQLite queue
  export       write recorded execution histories as JSON for the replayer (runtime/runtimetest)
  instances    list, show, cancel, delete... the instances of a database; see duroq instances help
  queues       list, peek, redrive, purge, pause... the queued messages of a database; see duroq queues help
  schedules    list, create, pause, resume, delete the durable schedules of a database; see duroq schedules help
  migrate      show (status), apply (up) or print (sql) duroq's schema migrations; see duroq migrate help
  ui           serve the web UI of a database (instances, histories, queues, dead letters); see duroq ui -h`)
	os.Exit(2)
}
