package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// commandGroup is a command made of subcommands, such as `duroq instances` or
// `duroq queues`, that operate on an existing database.
type commandGroup struct {
	name     string // "instances": the command is `duroq <name>`
	subject  string // what the first positional argument names, to say it is empty
	commands []instanceCommand
	// selfOpen: the subcommands open the database themselves (session.p is nil) and
	// check -db when they need it.
	selfOpen bool
	// synopsis is the flags of the usage line (default: -db, -schema and -json).
	synopsis string
}

const defaultSynopsis = "-db <sqlite file | postgres://...> [-schema name] [-json]"

func (g *commandGroup) flagSynopsis() string { return cmp.Or(g.synopsis, defaultSynopsis) }

// instanceCommand is a subcommand of `duroq instances` (or of another commandGroup).
type instanceCommand struct {
	name, args, help string // its name, its positional arguments ("[<id>]": may be left out) and what it does
	nargs            int    // how many positional arguments it takes
	// flags defines the subcommand's own flags on fs and returns what runs it.
	flags func(fs *flag.FlagSet) runner
}

// optional reports whether c's positional arguments may be left out: list's filters
// then select what it acts on.
func (c instanceCommand) optional() bool { return strings.HasPrefix(c.args, "[") }

// runner runs a subcommand on an open database with its positional arguments.
type runner func(ctx context.Context, s *session, args []string) error

// session is an open database and where a subcommand writes.
type session struct {
	cmd        string            // "duroq instances delete", which starts progress lines
	db, schema string            // the -db and -schema flags
	p          *adapter.Provider // nil in a selfOpen group
	admin      provider.ProviderAdmin
	out        io.Writer // results
	stderr     io.Writer // usage and the progress of long operations
	json       bool      // print JSON instead of tables
}

var instancesGroup = &commandGroup{name: "instances", subject: "the instance id", commands: instanceCommands}

var instanceCommands = []instanceCommand{
	{"list", "", "list the instances, a page at a time (in id order)", 0, listFlags},
	{"show", "<id>", "describe an instance: status, output or failure, custom status, executions", 1, noFlags(show)},
	{"history", "<id>", "list the events of an execution's history", 1, historyFlags},
	{"tree", "<id>", "show the instance and its sub-orchestrations, indented", 1, noFlags(tree)},
	{"cancel", "<id>", "ask a running instance to end (it fails, cancelled, at its next turn)", 1, cancelFlags},
	{"raise", "<id> <event-name> <data>", "raise an external event for a running instance (dropped unless it waits for it)", 3, noFlags(raise)},
	{"enqueue", "<id> <queue> <data>", "append a message to a running instance's queue", 3, noFlags(enqueue)},
	{"delete", "[<id>]", "delete a root instance with its sub-orchestrations, or (with -yes) the root instances list's filters select", 1, deleteFlags},
	{"prune", "[<id>]", "delete old executions of an instance (continue-as-new), or (with -yes) of the instances list's filters select", 1, pruneFlags},
	{"stats", "", "count the stored instances, executions, events and queued messages", 0, noFlags(stats)},
}

// cmdError is a failed command: its message is complete ("duroq instances show:
// ..."); a usage error exits with status 2, an interrupted command with 130, as a
// shell reports a command that Ctrl-C stopped.
type cmdError struct {
	msg         string
	usage       bool
	interrupted bool
}

func (e *cmdError) Error() string { return e.msg }

// exitCode is the process's exit status for err (not nil).
func exitCode(err error) int {
	ce := (*cmdError)(nil)
	switch {
	case !errors.As(err, &ce):
		return 1
	case ce.usage:
		return 2
	case ce.interrupted:
		return 130
	}
	return 1
}

// usageError is a mistake in the command line.
type usageError string

func (e usageError) Error() string { return string(e) }

// instancesCmd runs `duroq instances <subcommand> [flags] [args]`, writing results
// to stdout, usage and progress to stderr.
func instancesCmd(args []string, stdout, stderr io.Writer) error {
	return instancesGroup.run(args, stdout, stderr)
}

// run runs `duroq <g.name> <subcommand> [flags] [args]` until it ends or SIGINT or
// SIGTERM interrupts it.
func (g *commandGroup) run(args []string, stdout, stderr io.Writer) error {
	ctx, stop := interruptible()
	defer stop()
	return g.runContext(ctx, args, stdout, stderr)
}

// runContext runs `duroq <g.name> <subcommand> [flags] [args]` until it ends or ctx
// does, which interrupts it.
func (g *commandGroup) runContext(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		g.usage(stderr)
		return nil
	}
	if len(args) == 0 {
		g.usage(stderr)
		return &cmdError{msg: "duroq " + g.name + ": a subcommand is required", usage: true}
	}
	i := slices.IndexFunc(g.commands, func(c instanceCommand) bool { return c.name == args[0] })
	if i < 0 {
		g.usage(stderr)
		return &cmdError{msg: fmt.Sprintf("duroq %s: unknown subcommand %q", g.name, clip(args[0])), usage: true}
	}
	return g.exec(ctx, g.commands[i], args[1:], stdout, stderr)
}

func (g *commandGroup) usage(w io.Writer) {
	fmt.Fprintf(w, "usage: duroq %s <subcommand> %s [flags] [args]\n\nsubcommands:\n", g.name, g.flagSynopsis())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range g.commands {
		fmt.Fprintf(tw, "  %s %s\t%s\n", c.name, c.args, c.help)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nflags may come before or after the arguments; duroq %s <subcommand> -h lists them\n", g.name)
}

func (g *commandGroup) exec(ctx context.Context, c instanceCommand, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("duroq "+g.name+" "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error is reported once, bounded, below
	db := fs.String("db", "", "the database: a SQLite file, or a PostgreSQL URL (postgres://...)")
	schema := fs.String("schema", "public", "PostgreSQL schema holding duroq's tables")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	run := c.flags(fs)
	pos, err := parseArgs(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		g.cmdUsage(c, fs, stderr)
		return nil
	case err != nil:
		err = usageError(err.Error())
	default:
		err = g.check(c, fs, pos, *db)
	}
	if err == nil {
		s := &session{cmd: fs.Name(), db: *db, schema: *schema, out: stdout, stderr: stderr, json: *asJSON}
		var p *adapter.Provider
		if g.selfOpen {
			err = run(ctx, s, pos)
		} else if p, err = openExisting(ctx, *db, *schema); err == nil {
			defer p.Close()
			s.p, s.admin = p, p.Management()
			err = run(ctx, s, pos)
		}
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil && !errors.Is(err, errInterrupted) {
		err = fmt.Errorf("%w (%v)", errInterrupted, context.Cause(ctx)) // rather than what the storage said of it
	}
	msg := err.Error()
	for _, a := range args { // values echoed by the storage layers too are clipped
		if len(a) > 200 {
			msg = strings.ReplaceAll(msg, a, clip(a))
		}
	}
	ce := &cmdError{msg: "duroq " + g.name + " " + c.name + ": " + truncate(msg, 1000), interrupted: errors.Is(err, errInterrupted)}
	if ue := usageError(""); errors.As(err, &ue) {
		ce.usage = true
		g.cmdUsage(c, fs, stderr)
	}
	return ce
}

// check checks the positional arguments, the database and the filters of a command
// line.
func (g *commandGroup) check(c instanceCommand, fs *flag.FlagSet, pos []string, db string) error {
	switch {
	case len(pos) != c.nargs && !(len(pos) == 0 && c.optional()):
		return usageError(fmt.Sprintf("takes %s; got %d arguments", cmp.Or(c.args, "no arguments"), len(pos)))
	case len(pos) > 0 && c.optional() && filtered(fs):
		return usageError("takes " + g.subject + " or filters, not both")
	case db == "" && !g.selfOpen:
		return usageError("-db is required")
	case len(pos) > 0 && pos[0] == "":
		return usageError(g.subject + " is empty")
	case len(pos) > 1 && pos[1] == "":
		return usageError("the name is empty")
	}
	return nil
}

func (g *commandGroup) cmdUsage(c instanceCommand, fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "usage: duroq %s %s %s %s [flags]\n\n%s\n\n", g.name, c.name, c.args, g.flagSynopsis(), c.help)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// parseArgs parses fs's flags wherever they come among the positional arguments
// (the flag package stops at the first of these) and returns the positional ones;
// every argument after "--" is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// noFlags is a subcommand without flags of its own.
func noFlags(run runner) func(*flag.FlagSet) runner {
	return func(*flag.FlagSet) runner { return run }
}

// timeFlag defines a flag holding an RFC 3339 time.
func timeFlag(fs *flag.FlagSet, name, usage string, t *time.Time) {
	fs.Func(name, usage+" (RFC 3339, e.g. 2026-01-02T15:04:05Z)", func(v string) (err error) {
		if *t, err = time.Parse(time.RFC3339, v); err != nil {
			return errors.New("not an RFC 3339 time")
		}
		return nil
	})
}

// intFlag defines a flag holding an integer from least to most (math.MaxInt: no
// bound).
func intFlag(fs *flag.FlagSet, name, usage string, least, most int, n *int) {
	fs.Func(name, usage, func(v string) (err error) {
		if *n, err = strconv.Atoi(v); err == nil && *n >= least && *n <= most {
			return nil
		}
		if most == math.MaxInt {
			return fmt.Errorf("want an integer of at least %d", least)
		}
		return fmt.Errorf("want an integer from %d to %d", least, most)
	})
}

// ---- list ----

func listFlags(fs *flag.FlagSet) runner {
	q := filterFlags(fs)
	q.Limit = provider.DefaultPageSize
	intFlag(fs, "limit", fmt.Sprintf("instances per page, at most %d (default %d)", provider.MaxPageSize, q.Limit), 1, math.MaxInt, &q.Limit)
	fs.StringVar(&q.After, "after", "", "list from this cursor on (printed by the previous page)")
	all := fs.Bool("all", false, "follow the pages to the end")
	return func(ctx context.Context, s *session, _ []string) error { return s.list(ctx, *q, *all) }
}

// filterNames are the names of filterFlags' flags.
var filterNames = func() map[string]bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	filterFlags(fs)
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}()

// filtered reports whether a flag of filterFlags is set on fs.
func filtered(fs *flag.FlagSet) (set bool) {
	fs.Visit(func(f *flag.Flag) { set = set || filterNames[f.Name] })
	return set
}

// filterFlags defines the flags that select instances (those of list, which delete
// and prune share) and returns the query they fill.
func filterFlags(fs *flag.FlagSet) *provider.InstanceQuery {
	q := new(provider.InstanceQuery)
	fs.Func("status", "only instances whose current execution is Running, Completed, Failed or ContinuedAsNew", func(v string) error {
		if !slices.Contains([]string{provider.StatusRunning, provider.StatusCompleted, provider.StatusFailed, provider.StatusContinuedAsNew}, v) {
			return errors.New("want Running, Completed, Failed or ContinuedAsNew")
		}
		q.Status = v
		return nil
	})
	fs.StringVar(&q.Orchestration, "orchestration", "", "only instances of this orchestration")
	fs.StringVar(&q.IDPrefix, "prefix", "", "only instances whose id starts with this")
	fs.StringVar(&q.Parent, "parent", "", "only sub-orchestrations of this instance")
	fs.BoolVar(&q.RootsOnly, "roots", false, "only root instances (without a parent)")
	timeFlag(fs, "created-after", "only instances created at or after this time", &q.CreatedAfter)
	timeFlag(fs, "created-before", "only instances created before this time", &q.CreatedBefore)
	timeFlag(fs, "updated-after", "only instances last written at or after this time", &q.UpdatedAfter)
	timeFlag(fs, "updated-before", "only instances last written before this time", &q.UpdatedBefore)
	return q
}

// instanceJSON is an instance as list and show print it with -json.
type instanceJSON struct {
	ID            string    `json:"id"`
	Orchestration string    `json:"orchestration"`
	Version       string    `json:"version"`
	Status        string    `json:"status"`
	Execution     uint64    `json:"execution"`
	Parent        string    `json:"parent,omitempty"`
	Output        *string   `json:"output,omitempty"`
	Created       time.Time `json:"created"`
	Updated       time.Time `json:"updated"`
}

func instanceView(in provider.InstanceInfo) instanceJSON {
	return instanceJSON{in.InstanceID, in.OrchestrationName, in.OrchestrationVersion, in.Status, in.CurrentExecutionID,
		in.ParentInstanceID, in.Output, in.CreatedAt.UTC(), in.UpdatedAt.UTC()}
}

// list prints one page of the instances q selects, or every page when all is set,
// writing each page as it comes.
func (s *session) list(ctx context.Context, q provider.InstanceQuery, all bool) error {
	tw := &table{w: s.out}
	if s.json {
		io.WriteString(s.out, `{"instances":[`)
	} else {
		tw.add("ID", "ORCHESTRATION", "VERSION", "STATUS", "EXECUTION", "CREATED", "UPDATED")
	}
	sep := ""
	for {
		page, err := s.admin.ListInstancePage(ctx, q)
		if err != nil {
			return err
		}
		for _, in := range page.Instances {
			if !s.json {
				tw.add(cell(in.InstanceID), cell(in.OrchestrationName), cell(in.OrchestrationVersion), in.Status,
					strconv.FormatUint(in.CurrentExecutionID, 10), when(in.CreatedAt), when(in.UpdatedAt))
				continue
			}
			b, err := json.Marshal(instanceView(in))
			if err != nil {
				return err
			}
			fmt.Fprintf(s.out, "%s%s", sep, b)
			sep = ","
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if !all || page.Next == "" {
			return s.endList(page.Next, "instances follow: list")
		}
		q.After = page.Next
	}
}

// endList ends a listing, telling the cursor of the next page when one follows
// ("more <follow> the next page with -after <next>").
func (s *session) endList(next, follow string) error {
	if s.json {
		b, _ := json.Marshal(next)
		_, err := fmt.Fprintf(s.out, "],\"next\":%s}\n", b)
		return err
	}
	if next != "" {
		_, err := fmt.Fprintf(s.out, "more %s the next page with -after %s\n", follow, shellQuote(next))
		return err
	}
	return nil
}

// table prints rows in columns as wide as the widest cell added so far, a batch at
// a time, so that a listing streams page by page and stays aligned (unless a later
// page holds a wider cell).
type table struct {
	w      io.Writer
	widths []int
	rows   [][]string
}

func (t *table) add(cells ...string) {
	t.widths = append(t.widths, make([]int, max(0, len(cells)-len(t.widths)))...)
	for i, c := range cells {
		t.widths[i] = max(t.widths[i], utf8.RuneCountInString(c))
	}
	t.rows = append(t.rows, cells)
}

// Flush prints the rows added since the last Flush.
func (t *table) Flush() error {
	var b strings.Builder
	for _, r := range t.rows {
		for i, c := range r[:len(r)-1] {
			fmt.Fprintf(&b, "%-*s  ", t.widths[i], c)
		}
		b.WriteString(r[len(r)-1] + "\n")
	}
	t.rows = t.rows[:0]
	_, err := io.WriteString(t.w, b.String())
	return err
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellQuote quotes s for a POSIX shell, unless it needs no quoting.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ---- show ----

// showJSON is what show prints with -json.
type showJSON struct {
	instanceJSON
	Failure       string          `json:"failure,omitempty"`
	CustomStatus  *string         `json:"custom_status,omitempty"`
	PendingReason string          `json:"pending_reason,omitempty"` // why a start queued has not run
	Executions    []executionJSON `json:"executions"`
}

type executionJSON struct {
	ID        uint64    `json:"id"`
	Status    string    `json:"status"`
	Started   time.Time `json:"started"`
	Completed time.Time `json:"completed,omitzero"`
	Events    uint64    `json:"events"`
}

// show describes an instance; one started but not run yet is Pending (with why,
// when a runtime said), as Client.Status tells.
func show(ctx context.Context, s *session, args []string) error {
	id := args[0]
	st, err := runtime.NewClient(s.p).Status(ctx, id)
	if err != nil {
		return err
	}
	if st.State == runtime.StateNotFound {
		return notFound(id)
	}
	v := showJSON{instanceJSON: instanceJSON{ID: id, Orchestration: st.Name, Version: st.Version, Status: string(st.State)},
		Failure: st.Failure.DisplayMessage(), CustomStatus: st.CustomStatus, PendingReason: st.PendingReason, Executions: []executionJSON{}}
	if st.State != runtime.StatePending {
		info, err := s.info(ctx, id)
		if err != nil {
			return err
		}
		v.instanceJSON = instanceView(info)
		if v.Executions, err = s.executions(ctx, id); err != nil {
			return err
		}
	}
	return s.emit(v, func(w io.Writer) {
		row := func(k, val string, shown bool) {
			if shown {
				fmt.Fprintf(w, "%s:\t%s\n", k, cell(val))
			}
		}
		ran := st.State != runtime.StatePending
		row("Instance", v.ID, true)
		row("Orchestration", v.Orchestration, true)
		row("Version", v.Version, true)
		row("Status", v.Status, true)
		row("Execution", strconv.FormatUint(v.Execution, 10), ran)
		row("Created", when(v.Created), ran)
		row("Updated", when(v.Updated), ran)
		row("Parent", v.Parent, v.Parent != "")
		row("Output", deref(v.Output, ""), v.Output != nil && v.Failure == "")
		row("Failure", v.Failure, v.Failure != "")
		row("Custom status", deref(v.CustomStatus, ""), v.CustomStatus != nil)
		row("Pending because", v.PendingReason, v.PendingReason != "")
		if len(v.Executions) > 0 {
			fmt.Fprintln(w, "\nEXECUTION\tSTATUS\tSTARTED\tCOMPLETED\tEVENTS")
		}
		for _, e := range v.Executions {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\n", e.ID, e.Status, when(e.Started), when(e.Completed), e.Events)
		}
	})
}

// executions describes the instance's executions.
func (s *session) executions(ctx context.Context, id string) ([]executionJSON, error) {
	ids, err := s.admin.ListExecutions(ctx, id)
	if err != nil {
		return nil, err
	}
	views := []executionJSON{}
	for _, x := range ids {
		e, err := s.admin.GetExecutionInfo(ctx, id, x)
		if errors.Is(err, provider.ErrNotFound) {
			continue // pruned since it was listed
		}
		if err != nil {
			return nil, err
		}
		views = append(views, executionJSON{e.ExecutionID, e.Status, e.StartedAt.UTC(), e.CompletedAt.UTC(), e.EventCount})
	}
	return views, nil
}

// ---- history ----

func historyFlags(fs *flag.FlagSet) runner {
	execution := fs.Uint64("execution", 0, "the execution to list (default: the current one)")
	return func(ctx context.Context, s *session, args []string) error {
		id := args[0]
		info, err := s.info(ctx, id)
		if err != nil {
			return err
		}
		x := cmp.Or(*execution, info.CurrentExecutionID)
		if _, err := s.admin.GetExecutionInfo(ctx, id, x); errors.Is(err, provider.ErrNotFound) {
			return fmt.Errorf("instance %q has no execution %d (see show)", clip(id), x)
		} else if err != nil {
			return err
		}
		events, err := s.admin.ReadHistoryWithExecutionID(ctx, id, x)
		if err != nil {
			return err
		}
		views := make([]eventJSON, len(events))
		for i, e := range events {
			views[i] = eventJSON{ID: e.EventID, Kind: string(e.Kind), Name: e.Name, Time: time.UnixMilli(e.TimestampMs).UTC(), fields: e.Fields()}
			if len(views[i].fields) > 0 {
				views[i].Fields = map[string]string{}
				for _, f := range views[i].fields {
					views[i].Fields[f.Name] = f.Value
				}
			}
		}
		return s.emit(views, func(w io.Writer) {
			fmt.Fprintln(w, "ID\tKIND\tNAME\tTIME\tDETAILS")
			for _, e := range views {
				details := make([]string, len(e.fields))
				for i, f := range e.fields {
					details[i] = f.Name + "=" + strconv.Quote(truncate(f.Value, 60))
				}
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", e.ID, e.Kind, cell(e.Name), when(e.Time), strings.Join(details, " "))
			}
		})
	}
}

// eventJSON is a history event as history prints it with -json.
type eventJSON struct {
	ID     uint64                `json:"id"`
	Kind   string                `json:"kind"`
	Name   string                `json:"name,omitempty"`
	Time   time.Time             `json:"time"`
	Fields map[string]string     `json:"fields,omitempty"` // the meaningful fields of its kind
	fields []provider.EventField // Fields in order, for the table
}

func deref(s *string, none string) string {
	if s == nil {
		return none
	}
	return *s
}

// ---- tree ----

// treeJSON is an instance and its descendants, as tree prints them with -json.
type treeJSON struct {
	ID            string      `json:"id"`
	Orchestration string      `json:"orchestration"`
	Status        string      `json:"status"`
	Children      []*treeJSON `json:"children,omitempty"`
}

func tree(ctx context.Context, s *session, args []string) error {
	root, err := s.subtree(ctx, args[0])
	if err != nil {
		return err
	}
	return s.emit(root, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tORCHESTRATION\tSTATUS")
		var walk func(n *treeJSON, indent string)
		walk = func(n *treeJSON, indent string) {
			fmt.Fprintf(w, "%s%s\t%s\t%s\n", indent, cell(n.ID), cell(n.Orchestration), n.Status)
			for _, c := range n.Children {
				walk(c, indent+"  ")
			}
		}
		walk(root, "")
	})
}

func (s *session) subtree(ctx context.Context, id string) (*treeJSON, error) {
	info, err := s.info(ctx, id)
	if err != nil {
		return nil, err
	}
	n := &treeJSON{ID: id, Orchestration: info.OrchestrationName, Status: info.Status}
	children, err := s.admin.ListChildren(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, c := range children {
		child, err := s.subtree(ctx, c)
		if err != nil {
			return nil, err
		}
		n.Children = append(n.Children, child)
	}
	return n, nil
}

// ---- cancel, raise, enqueue ----

func cancelFlags(fs *flag.FlagSet) runner {
	reason := fs.String("reason", "cancelled by duroq instances cancel", "why, recorded in the instance's failure")
	return func(ctx context.Context, s *session, args []string) error {
		return s.send(ctx, args[0], "cancellation", func(c *runtime.Client) error { return c.CancelInstance(ctx, args[0], *reason) })
	}
}

// raise takes the instance, the event's name and its data.
func raise(ctx context.Context, s *session, a []string) error {
	return s.send(ctx, a[0], fmt.Sprintf("event %q", clip(a[1])), func(c *runtime.Client) error { return c.RaiseEvent(ctx, a[0], a[1], a[2]) })
}

// enqueue takes the instance, the queue's name and the message.
func enqueue(ctx context.Context, s *session, a []string) error {
	return s.send(ctx, a[0], fmt.Sprintf("message for queue %q", clip(a[1])), func(c *runtime.Client) error { return c.EnqueueEvent(ctx, a[0], a[1], a[2]) })
}

// send sends what to the instance id, which must not have ended, through a client.
func (s *session) send(ctx context.Context, id, what string, send func(*runtime.Client) error) error {
	info, err := s.info(ctx, id)
	if err != nil {
		return err
	}
	if info.Status == provider.StatusCompleted || info.Status == provider.StatusFailed {
		return fmt.Errorf("instance %q has ended (%s): not sending the %s", clip(id), info.Status, what)
	}
	if err := send(runtime.NewClient(s.p)); err != nil {
		return err
	}
	return s.emit(map[string]string{"instance": id, "sent": what}, func(w io.Writer) {
		fmt.Fprintf(w, "sent the %s to %s: a running runtime delivers it at the instance's next turn\n", what, cell(id))
	})
}

// ---- delete, prune ----

func deleteFlags(fs *flag.FlagSet) runner {
	force := fs.Bool("force", false, "delete running instances too, and those with a running sub-orchestration")
	sel := selectionFlags(fs, "root instances per page, each page deleted in one transaction")
	return func(ctx context.Context, s *session, args []string) error {
		if len(args) == 0 {
			return s.deleteSelected(ctx, sel, *force)
		}
		id := args[0]
		info, err := s.info(ctx, id)
		if err != nil {
			return err
		}
		if info.ParentInstanceID != "" {
			return fmt.Errorf("instance %q is a sub-orchestration of %q: delete its root instead", clip(id), clip(info.ParentInstanceID))
		}
		if info.Status == provider.StatusRunning && !*force {
			return fmt.Errorf("instance %q is running: -force deletes it anyway", clip(id))
		}
		r, err := s.admin.DeleteInstance(ctx, id, *force)
		if errors.Is(err, provider.ErrInvalid) && !*force {
			return fmt.Errorf("%w (-force deletes running instances)", err)
		} else if err != nil {
			return err
		}
		return s.counts("deleted "+cell(id)+": ", map[string]any{"instance": id}, deletedCounts(r), "")
	}
}

// deletedCounts are the counts of a deletion, as delete prints them.
func deletedCounts(r provider.DeleteInstanceResult) []count {
	return []count{{"instances", r.InstancesDeleted}, {"executions", r.ExecutionsDeleted}, {"events", r.EventsDeleted},
		{"queue_messages", r.QueueMessagesDeleted}}
}

func pruneFlags(fs *flag.FlagSet) runner {
	o := provider.PruneOptions{KeepLast: 1}
	intFlag(fs, "keep-last", "keep the latest this many executions (default 1: only the current one)", 0, math.MaxInt, &o.KeepLast)
	timeFlag(fs, "completed-before", "delete only executions completed before this time", &o.CompletedBefore)
	sel := selectionFlags(fs, "instances per page, each page pruned in one transaction")
	return func(ctx context.Context, s *session, args []string) error {
		if len(args) == 0 {
			return s.pruneSelected(ctx, sel, o)
		}
		if _, err := s.info(ctx, args[0]); err != nil {
			return err
		}
		r, err := s.admin.PruneExecutions(ctx, args[0], o)
		if err != nil {
			return err
		}
		return s.counts("pruned "+cell(args[0])+": ", map[string]any{"instance": args[0]}, prunedCounts(r), "")
	}
}

// prunedCounts are the counts of a prune, as prune prints them.
func prunedCounts(r provider.PruneResult) []count {
	return []count{{"executions", r.ExecutionsDeleted}, {"events", r.EventsDeleted}}
}

// count is a named number that delete, prune and stats print.
type count struct {
	name string
	n    uint64
}

// counts prints title and the counts on one line ("deleted x: 2 instances, ...")
// ended by note, or with -json an object of the counts and of fields.
func (s *session) counts(title string, fields map[string]any, counts []count, note string) error {
	for _, c := range counts {
		fields[c.name] = c.n
	}
	return s.emit(fields, func(w io.Writer) { fmt.Fprintf(w, "%s%s%s\n", title, countLine(counts), note) })
}

// countLine renders counts as "2 instances, 3 executions".
func countLine(counts []count) string {
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = fmt.Sprintf("%d %s", c.n, strings.ReplaceAll(c.name, "_", " "))
	}
	return strings.Join(parts, ", ")
}

// ---- stats ----

func stats(ctx context.Context, s *session, _ []string) error {
	m, err := s.admin.GetSystemMetrics(ctx)
	if err != nil {
		return err
	}
	q, err := s.admin.GetQueueDepths(ctx)
	if err != nil {
		return err
	}
	stored := []count{{"instances", m.TotalInstances}, {"running", m.RunningInstances}, {"completed", m.CompletedInstances},
		{"failed", m.FailedInstances}, {"executions", m.TotalExecutions}, {"events", m.TotalEvents}}
	queued := []count{{"orchestrator_queue", q.OrchestratorQueue}, {"worker_queue", q.WorkerQueue}, {"timers", q.TimerQueue}}
	v := map[string]uint64{}
	for _, c := range append(slices.Clone(stored), queued...) {
		v[c.name] = c.n
	}
	return s.emit(v, func(w io.Writer) {
		fmt.Fprintf(w, "stored:\t%s\nqueued messages:\t%s\n", countLine(stored), countLine(queued))
	})
}

// ---- shared ----

// info describes the instance id; an unknown one is an error saying so.
func (s *session) info(ctx context.Context, id string) (provider.InstanceInfo, error) {
	info, err := s.admin.GetInstanceInfo(ctx, id)
	if errors.Is(err, provider.ErrNotFound) {
		return info, notFound(id)
	}
	return info, err
}

func notFound(id string) error { return fmt.Errorf("instance %q not found", clip(id)) }

// emit prints v as JSON with -json, else what text writes, aligned in columns.
func (s *session) emit(v any, text func(w io.Writer)) error {
	if s.json {
		enc := json.NewEncoder(s.out)
		enc.SetEscapeHTML(false)
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(s.out, 0, 0, 2, ' ', 0)
	text(tw)
	return tw.Flush()
}

const timeLayout = "2006-01-02T15:04:05.000Z07:00" // RFC 3339, in milliseconds

// when formats t for a table ("-" for the zero time).
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeLayout)
}

// cell renders a stored value on one line of a table: "-" when empty, quoted when
// it holds control characters (a newline, a tab, a terminal escape).
func cell(v string) string {
	if v == "" {
		return "-"
	}
	if strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return strconv.Quote(v)
	}
	return v
}

// clip bounds a value given by the user for an error message: 200 bytes of it at
// most, then "...".
func clip(s string) string { return truncate(s, 200) }

// truncate bounds s to n bytes, marking the cut with "...".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}
