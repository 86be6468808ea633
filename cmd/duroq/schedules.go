package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/schedule"
)

var schedulesGroup = &commandGroup{name: "schedules", subject: "the schedule id", commands: []instanceCommand{
	{"list", "", "list the schedules in id order, a page at a time: when they fire, what, their next slot and state", 0, listSchedulesFlags},
	{"show", "<id>", "describe a schedule: its definition, next slot, state and last error", 1, scheduleFlags(showSchedule)},
	{"create", "<id>", "create a schedule (-cron or -every) that enqueues a message (-enqueue) or starts an orchestration (-start)", 1, definitionFlags((*schedule.Manager).Create)},
	{"update", "<id>", "replace a schedule's definition (the flags of create) atomically: it fires from the new definition's next slot, paused if it was", 1, definitionFlags((*schedule.Manager).Update)},
	{"pause", "<id>", "stop a schedule from firing until resumed", 1, scheduleFlags(pauseSchedule)},
	{"resume", "<id>", "make a paused schedule fire again from its next slot after now (the slots it missed never fire)", 1, scheduleFlags(resumeSchedule)},
	{"delete", "<id>", "delete a schedule", 1, scheduleFlags(deleteSchedule)},
}}

// schedulesCmd runs `duroq schedules <subcommand> [flags] [args]`, writing results
// to stdout, usage to stderr. The Schedulers of the applications that share the
// database fire the schedules.
func schedulesCmd(args []string, stdout, stderr io.Writer) error {
	return schedulesGroup.run(args, stdout, stderr)
}

// scheduleRunner runs a schedules subcommand with the database's schedules.
type scheduleRunner func(ctx context.Context, s *session, m *schedule.Manager, args []string) error

// withSchedules defines -queue, the queue holding the schedules, and runs run with
// the manager of that queue.
func withSchedules(fs *flag.FlagSet, run scheduleRunner) runner {
	queue := fs.String("queue", schedule.DefaultQueue, "the queue holding the schedules")
	return func(ctx context.Context, s *session, args []string) error {
		m, err := schedule.NewManager(s.p.Queue(), schedule.ManagerOptions{Queue: *queue})
		if err != nil {
			return err
		}
		return run(ctx, s, m, args)
	}
}

// scheduleFlags is a subcommand with no flags but -queue.
func scheduleFlags(run scheduleRunner) func(*flag.FlagSet) runner {
	return func(fs *flag.FlagSet) runner { return withSchedules(fs, run) }
}

// scheduleJSON is a schedule as the subcommands print it with -json.
type scheduleJSON struct {
	ID            string             `json:"id"`
	Cron          string             `json:"cron,omitempty"`
	TimeZone      string             `json:"time_zone,omitempty"`
	Every         string             `json:"every,omitempty"`
	Anchor        time.Time          `json:"anchor,omitzero"`
	Jitter        string             `json:"jitter,omitempty"`
	Catchup       string             `json:"catchup"`
	CatchupWindow string             `json:"catchup_window"`
	MaxCatchup    int                `json:"max_catchup"`
	Overlap       string             `json:"overlap"`
	Enqueue       *enqueueJSON       `json:"enqueue,omitempty"`
	Orchestration *orchestrationJSON `json:"orchestration,omitempty"`
	Next          time.Time          `json:"next,omitzero"`
	FiresAt       time.Time          `json:"fires_at,omitzero"`
	Paused        bool               `json:"paused"`
	Firing        bool               `json:"firing"`
	LastInstance  string             `json:"last_instance,omitempty"`
	Attempt       int                `json:"attempt,omitempty"`
	LastError     string             `json:"last_error,omitempty"`
}

type enqueueJSON struct {
	Queue      string `json:"queue"`
	RoutingKey string `json:"routing_key,omitempty"`
	Tag        string `json:"tag,omitempty"`
	Payload    []byte `json:"payload"`
}

type orchestrationJSON struct {
	Name  string `json:"name"`
	Input string `json:"input"`
}

func scheduleView(in schedule.Info) scheduleJSON {
	v := scheduleJSON{ID: in.ID, Cron: in.Cron, TimeZone: in.TimeZone, Catchup: string(in.Catchup),
		CatchupWindow: in.CatchupWindow.String(), MaxCatchup: in.MaxCatchup, Overlap: string(in.Overlap),
		Next: in.Next, FiresAt: in.FiresAt, Paused: in.Paused, Firing: in.Firing, LastInstance: in.LastInstance,
		Attempt: in.Attempt, LastError: in.LastError}
	if in.Every > 0 {
		v.Every, v.Anchor = in.Every.String(), in.Anchor
	}
	if in.Jitter > 0 {
		v.Jitter = in.Jitter.String()
	}
	if e := in.Enqueue; e != nil {
		v.Enqueue = &enqueueJSON{e.Queue, e.RoutingKey, e.Tag, e.Payload}
	}
	if o := in.Orchestration; o != nil {
		v.Orchestration = &orchestrationJSON{o.Name, o.Input}
	}
	return v
}

// when is how the schedule fires, on one line.
func (v scheduleJSON) when() string {
	w := "every " + v.Every
	if v.Cron != "" {
		w = "cron " + v.Cron + " " + v.TimeZone
	}
	if v.Jitter != "" {
		w += " (jitter " + v.Jitter + ")"
	}
	return w
}

// target is what the schedule does, on one line.
func (v scheduleJSON) target() string {
	if o := v.Orchestration; o != nil {
		return "start " + o.Name
	}
	return "enqueue " + v.Enqueue.Queue
}

func (v scheduleJSON) state() string {
	switch {
	case v.Paused:
		return "paused"
	case v.Firing:
		return "firing"
	case v.Attempt > 0:
		return "retrying"
	}
	return "active"
}

// ---- list ----

func listSchedulesFlags(fs *flag.FlagSet) runner {
	var o schedule.ListOptions
	fs.StringVar(&o.After, "after", "", "list the schedules whose id sorts after this one (printed by the previous page)")
	o.Limit = mq.DefaultPeek
	intFlag(fs, "limit", fmt.Sprintf("schedules per page, 1 to %d (default %d)", mq.MaxPeek, o.Limit), 1, mq.MaxPeek, &o.Limit)
	return withSchedules(fs, func(ctx context.Context, s *session, m *schedule.Manager, _ []string) error {
		page, err := m.List(ctx, o)
		if err != nil {
			return err
		}
		const follow = "schedules follow: list"
		if s.json {
			io.WriteString(s.out, `{"schedules":[`)
			for i, in := range page.Schedules {
				b, err := json.Marshal(scheduleView(in))
				if err != nil {
					return err
				}
				if i > 0 {
					io.WriteString(s.out, ",")
				}
				s.out.Write(b)
			}
			return s.endList(page.Next, follow)
		}
		if len(page.Schedules) == 0 {
			_, err := fmt.Fprintln(s.out, "no schedules")
			return err
		}
		failed := false
		for _, in := range page.Schedules {
			failed = failed || in.LastError != ""
		}
		tw := &table{w: s.out}
		head := []string{"ID", "SCHEDULE", "TARGET", "NEXT", "FIRES AT", "STATE"}
		if failed {
			head = append(head, "LAST ERROR")
		}
		tw.add(head...)
		for _, in := range page.Schedules {
			v := scheduleView(in)
			row := []string{cell(v.ID), cell(v.when()), cell(v.target()), when(v.Next), when(v.FiresAt), v.state()}
			if failed {
				row = append(row, cell(truncate(v.LastError, 100)))
			}
			tw.add(row...)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		return s.endList(page.Next, follow)
	})
}

// ---- show, pause, resume, delete ----

// printSchedule prints a schedule, one field a line (JSON with -json).
func (s *session) printSchedule(in schedule.Info) error {
	v := scheduleView(in)
	return s.emit(v, func(w io.Writer) {
		row := func(k, val string, shown bool) {
			if shown {
				fmt.Fprintf(w, "%s:\t%s\n", k, cell(val))
			}
		}
		row("Schedule", v.ID, true)
		row("Cron", v.Cron, v.Cron != "")
		row("Time zone", v.TimeZone, v.Cron != "")
		row("Every", v.Every, v.Every != "")
		row("Anchor", when(v.Anchor), v.Every != "")
		row("Jitter", v.Jitter, v.Jitter != "")
		catchup := v.Catchup
		switch in.Catchup {
		case schedule.CatchupSkip:
			catchup += " (window " + v.CatchupWindow + ")"
		case schedule.CatchupAll:
			catchup += " (at most " + strconv.Itoa(v.MaxCatchup) + " slots)"
		}
		row("Catch-up", catchup, true)
		row("Overlap", v.Overlap, v.Orchestration != nil)
		if e := v.Enqueue; e != nil {
			row("Enqueue to", e.Queue, true)
			row("Routing key", e.RoutingKey, e.RoutingKey != "")
			row("Tag", e.Tag, e.Tag != "")
			row("Payload", payloadCell(e.Payload), true)
		}
		if o := v.Orchestration; o != nil {
			row("Start", o.Name, true)
			row("Input", payloadCell([]byte(o.Input)), true)
		}
		row("State", v.state(), true)
		row("Next slot", when(v.Next), !v.Paused)
		row("Fires at", when(v.FiresAt), !v.FiresAt.IsZero())
		row("Last instance", v.LastInstance, v.LastInstance != "")
		row("Attempt", strconv.Itoa(v.Attempt), v.Attempt > 0)
		row("Last error", truncate(v.LastError, 1000), v.LastError != "")
	})
}

func showSchedule(ctx context.Context, s *session, m *schedule.Manager, args []string) error {
	in, err := m.Get(ctx, args[0])
	if err != nil {
		return err
	}
	return s.printSchedule(in)
}

func pauseSchedule(ctx context.Context, s *session, m *schedule.Manager, args []string) error {
	in, err := m.Pause(ctx, args[0])
	if err != nil {
		return err
	}
	return s.printSchedule(in)
}

func resumeSchedule(ctx context.Context, s *session, m *schedule.Manager, args []string) error {
	in, err := m.Resume(ctx, args[0])
	if err != nil {
		return err
	}
	return s.printSchedule(in)
}

func deleteSchedule(ctx context.Context, s *session, m *schedule.Manager, args []string) error {
	if err := m.Delete(ctx, args[0]); err != nil {
		return err
	}
	return s.emit(map[string]string{"deleted": args[0]}, func(w io.Writer) {
		fmt.Fprintf(w, "deleted schedule %s\n", cell(args[0]))
	})
}

// ---- create, update ----

// definitionFlags defines the flags of a schedule's definition and runs store (the
// Manager's Create or Update) with it.
func definitionFlags(store func(*schedule.Manager, context.Context, schedule.Schedule) (schedule.Info, error)) func(*flag.FlagSet) runner {
	return func(fs *flag.FlagSet) runner { return scheduleDefinition(fs, store) }
}

func scheduleDefinition(fs *flag.FlagSet, store func(*schedule.Manager, context.Context, schedule.Schedule) (schedule.Info, error)) runner {
	var sc schedule.Schedule
	fs.StringVar(&sc.Cron, "cron", "", "fire at the times of this cron expression: 5 fields (minute first), 6 with seconds, or @daily, @hourly...")
	fs.StringVar(&sc.TimeZone, "tz", "", "the IANA time zone -cron is read in, e.g. Europe/Paris (default UTC)")
	fs.DurationVar(&sc.Every, "every", 0, "fire every this long instead (whole seconds, at least 1s)")
	timeFlag(fs, "anchor", "the phase of -every: slots are anchor + k·every (default the Unix epoch)", &sc.Anchor)
	fs.DurationVar(&sc.Jitter, "jitter", 0, "delay each firing by a random duration below this (the slot id does not move)")
	fs.Func("catchup", "after downtime fire: skip (only a slot at most -catchup-window late), one (the latest slot; default) or all (each, up to -max-catchup)",
		func(v string) error { sc.Catchup = schedule.CatchupPolicy(v); return nil })
	fs.DurationVar(&sc.CatchupWindow, "catchup-window", 0, "how late a slot may fire under -catchup skip (default 1m)")
	intFlag(fs, "max-catchup", fmt.Sprintf("the most missed slots -catchup all fires (default %d)", schedule.DefaultMaxCatchup), 1, schedule.MaxCatchupLimit, &sc.MaxCatchup)
	fs.Func("overlap", "for -start: allow (default) or skip (a slot while the previous slot's instance runs)",
		func(v string) error { sc.Overlap = schedule.OverlapPolicy(v); return nil })
	var e schedule.EnqueueTarget
	var payload string
	fs.StringVar(&e.Queue, "enqueue", "", "each firing enqueues a message to this queue (its message key is the slot id)")
	fs.StringVar(&e.RoutingKey, "key", "", "with -enqueue: the message's routing key")
	fs.StringVar(&e.Tag, "tag", "", "with -enqueue: the message's tag")
	fs.StringVar(&payload, "payload", "", "with -enqueue: the message's payload (text)")
	var o schedule.OrchestrationTarget
	fs.StringVar(&o.Name, "start", "", "each firing starts this orchestration, its instance id the slot id")
	fs.StringVar(&o.Input, "input", "", "with -start: the orchestration's input")
	return withSchedules(fs, func(ctx context.Context, s *session, m *schedule.Manager, args []string) error {
		sc.ID = args[0]
		switch {
		case (sc.Cron == "") == (sc.Every == 0):
			return usageError("give -cron or -every")
		case (e.Queue == "") == (o.Name == ""):
			return usageError("give -enqueue <queue> or -start <orchestration>")
		case e.Queue == "" && (e.RoutingKey != "" || e.Tag != "" || payload != ""):
			return usageError("-key, -tag and -payload go with -enqueue")
		case o.Name == "" && o.Input != "":
			return usageError("-input goes with -start")
		case e.Queue != "":
			e.Payload = []byte(payload)
			sc.Enqueue = &e
		default:
			sc.Orchestration = &o
		}
		in, err := store(m, ctx, sc)
		if err != nil {
			return err
		}
		return s.printSchedule(in)
	})
}
