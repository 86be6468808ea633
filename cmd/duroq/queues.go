package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/duroq/duroq/mq"
)

var queuesGroup = &commandGroup{name: "queues", subject: "the queue name", commands: []instanceCommand{
	{"list", "", "list every queue that holds messages (dead-letter queues included) or is paused, with its counts", 0, noFlags(listQueues)},
	{"stats", "<queue>", "count the messages of a queue (or of one routing key)", 1, queueStatsFlags},
	{"peek", "<queue>", "show a page of a queue's messages in id order, without locking them", 1, peekFlags(false)},
	{"dead-letters", "<queue>", "peek at a dead-letter queue: origin, attempts, failure times and last error", 1, peekFlags(true)},
	{"redrive", "<dead-letter-queue>", "move dead letters back to the queue each came from (or -to another), a page at a time", 1, redriveFlags},
	{"purge", "<queue>", "delete a queue's messages (or those of a key, or by id), locked or not; needs -yes", 1, purgeFlags},
	{"pause", "<queue>", "pause a queue in every process: consumers receive none of its messages until resume; producers go on", 1, noFlags(pauseRunner(true))},
	{"resume", "<queue>", "resume a paused queue: its consumers receive its messages again, in order", 1, noFlags(pauseRunner(false))},
	{"limit", "<queue>", "bound a queue (or a -group of it) in every process: -max-in-flight batches at once, -rate messages -per interval; -remove lifts it", 1, limitFlags},
	{"limits", "<queue>", "list a queue's limits with the batches each holds in flight", 1, noFlags(listLimits)},
}}

// queuesCmd runs `duroq queues <subcommand> [flags] [args]`, writing results to
// stdout, usage and progress to stderr.
func queuesCmd(args []string, stdout, stderr io.Writer) error {
	return queuesGroup.run(args, stdout, stderr)
}

// queueAdmin is the database's message queue, which must let operators peek,
// redrive and purge.
func (s *session) queueAdmin() (mq.Admin, error) {
	a, ok := s.p.Queue().(mq.Admin)
	if !ok {
		return nil, fmt.Errorf("the %T queue does not support mq.Admin", s.p.Queue())
	}
	return a, nil
}

// keyFlag defines -key, the routing key a subcommand is restricted to.
func keyFlag(fs *flag.FlagSet, what string) *string {
	return fs.String("key", "", what+" only the messages of this routing key")
}

// idsFlag defines -id, repeatable, the message ids a subcommand is restricted to.
func idsFlag(fs *flag.FlagSet, what string) *[]int64 {
	var ids []int64
	fs.Func("id", what+" only the message with this id (repeatable)", func(v string) error {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id < 1 {
			return errors.New("want a message id (a positive integer)")
		}
		ids = append(ids, id)
		return nil
	})
	return &ids
}

// ---- list, stats ----

// queueStatsJSON is a queue's counts as list and stats print them with -json.
type queueStatsJSON struct {
	Queue       string    `json:"queue"`
	Key         string    `json:"key,omitempty"`
	Ready       int       `json:"ready"`
	Delayed     int       `json:"delayed"`
	Locked      int       `json:"locked"`
	MaxAttempt  int       `json:"max_attempt"`
	NextVisible time.Time `json:"next_visible,omitzero"`
	Paused      bool      `json:"paused"`
}

func queueStatsView(queue, key string, st mq.Stats) queueStatsJSON {
	var next time.Time
	if !st.NextVisible.IsZero() {
		next = st.NextVisible.UTC()
	}
	return queueStatsJSON{queue, key, st.Ready, st.Delayed, st.Locked, st.MaxAttempt, next, st.Paused}
}

func listQueues(ctx context.Context, s *session, _ []string) error {
	a, err := s.queueAdmin()
	if err != nil {
		return err
	}
	qs, err := a.Queues(ctx)
	if err != nil {
		return err
	}
	views := make([]queueStatsJSON, len(qs))
	for i, q := range qs {
		views[i] = queueStatsView(q.Queue, "", q.Stats)
	}
	return s.emit(map[string][]queueStatsJSON{"queues": views}, func(w io.Writer) {
		fmt.Fprintln(w, "QUEUE\tREADY\tDELAYED\tLOCKED\tMAX ATTEMPT\tNEXT VISIBLE\tPAUSED")
		for _, q := range views {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", cell(q.Queue), q.Ready, q.Delayed, q.Locked, q.MaxAttempt, when(q.NextVisible), yesNo(q.Paused))
		}
	})
}

// queueStats counts the messages of queue, or of one of its keys.
func (s *session) queueStats(ctx context.Context, queue, key string) (mq.Stats, error) {
	if key != "" {
		return s.p.Queue().KeyStats(ctx, queue, key)
	}
	return s.p.Queue().Stats(ctx, queue)
}

func queueStatsFlags(fs *flag.FlagSet) runner {
	key := keyFlag(fs, "count")
	return func(ctx context.Context, s *session, args []string) error {
		st, err := s.queueStats(ctx, args[0], *key)
		if err != nil {
			return err
		}
		v := queueStatsView(args[0], *key, st)
		return s.emit(v, func(w io.Writer) {
			fmt.Fprintf(w, "Queue:\t%s\n", cell(v.Queue))
			if v.Key != "" {
				fmt.Fprintf(w, "Key:\t%s\n", cell(v.Key))
			}
			fmt.Fprintf(w, "Ready:\t%d\nDelayed:\t%d\nLocked:\t%d\nMax attempt:\t%d\nNext visible:\t%s\nPaused:\t%s\n",
				v.Ready, v.Delayed, v.Locked, v.MaxAttempt, when(v.NextVisible), yesNo(v.Paused))
		})
	}
}

// ---- peek, dead-letters ----

// peekFlags is peek, or with dead dead-letters: the same page with the columns
// that describe a dead letter.
func peekFlags(dead bool) func(fs *flag.FlagSet) runner {
	return func(fs *flag.FlagSet) runner {
		var o mq.PeekOptions
		fs.StringVar(&o.RoutingKey, "key", "", "show only the messages of this routing key")
		fs.Func("after", "show the messages after this id (printed by the previous page)", func(v string) (err error) {
			if v == "" {
				o.AfterID = 0 // the first page, as instances list -after ""
				return nil
			}
			if o.AfterID, err = strconv.ParseInt(v, 10, 64); err != nil || o.AfterID < 0 {
				return errors.New("want a message id (a non-negative integer)")
			}
			return nil
		})
		o.Limit = mq.DefaultPeek
		intFlag(fs, "limit", fmt.Sprintf("messages per page, 1 to %d (default %d)", mq.MaxPeek, o.Limit), 1, mq.MaxPeek, &o.Limit)
		fs.Func("state", "show only the messages in this state: ready, delayed or locked", func(v string) error {
			o.State = mq.MessageState(v)
			if !slices.Contains([]mq.MessageState{mq.StateReady, mq.StateDelayed, mq.StateLocked}, o.State) {
				return errors.New("want ready, delayed or locked")
			}
			return nil
		})
		payload := fs.Bool("payload", false, "show each message's payload (text, else hex; clipped), -json always has it")
		return func(ctx context.Context, s *session, args []string) error {
			return s.peek(ctx, args[0], o, dead, *payload)
		}
	}
}

// peek prints a page of the messages of queue that o selects: with dead, the
// dead-letter columns; with payload, their payloads.
func (s *session) peek(ctx context.Context, queue string, o mq.PeekOptions, dead, payload bool) error {
	a, err := s.queueAdmin()
	if err != nil {
		return err
	}
	page, err := a.Peek(ctx, queue, o)
	if err != nil {
		return err
	}
	next := ""
	if len(page) == o.Limit {
		next = strconv.FormatInt(page[len(page)-1].ID, 10)
	}
	const follow = "messages may follow: peek at"
	if s.json {
		io.WriteString(s.out, `{"messages":[`)
		for i, m := range page {
			for _, t := range []*time.Time{&m.EnqueuedAt, &m.VisibleAt, &m.FirstFailedAt, &m.LastFailedAt, &m.DeadLetteredAt} {
				if !t.IsZero() {
					*t = t.UTC()
				}
			}
			b, err := json.Marshal(m)
			if err != nil {
				return err
			}
			if i > 0 {
				io.WriteString(s.out, ",")
			}
			s.out.Write(b)
		}
		return s.endList(next, follow)
	}
	if len(page) == 0 {
		what := fmt.Sprintf("queue %s holds no messages", cell(queue))
		if o.RoutingKey != "" {
			what += " of key " + cell(o.RoutingKey)
		}
		if o.AfterID > 0 {
			what += " after id " + strconv.FormatInt(o.AfterID, 10)
		}
		_, err := fmt.Fprintln(s.out, what)
		return err
	}
	// Peek shows the failure columns when the page holds a failed message or a dead
	// letter; dead-letters always does, with the failure times.
	failed := dead
	prioritized := false // the page holds a message with a priority: show the column
	for _, m := range page {
		failed = failed || m.OriginQueue != "" || m.LastError != ""
		prioritized = prioritized || m.Priority != 0
	}
	tw := &table{w: s.out}
	head := []string{"ID", "KEY", "ATTEMPT", "ENQUEUED", "VISIBLE", "LOCKED", "TAG"}
	if dead {
		head = []string{"ID", "KEY", "ATTEMPT", "ORIGIN", "DEAD-LETTERED", "FIRST FAILED", "LAST FAILED", "TAG"}
	} else if failed {
		head = append(head, "ORIGIN")
	}
	if prioritized {
		head = append(head, "PRIORITY")
	}
	if payload {
		head = append(head, "PAYLOAD")
	}
	if failed {
		head = append(head, "LAST ERROR")
	}
	tw.add(head...)
	for _, m := range page {
		row := []string{strconv.FormatInt(m.ID, 10), cell(m.RoutingKey), strconv.Itoa(m.Attempt)}
		if dead {
			row = append(row, cell(m.OriginQueue), when(m.DeadLetteredAt), when(m.FirstFailedAt), when(m.LastFailedAt), cell(m.Tag))
		} else {
			row = append(row, when(m.EnqueuedAt), when(m.VisibleAt), yesNo(m.Locked), cell(m.Tag))
			if failed {
				row = append(row, cell(m.OriginQueue))
			}
		}
		if prioritized {
			row = append(row, strconv.Itoa(m.Priority))
		}
		if payload {
			row = append(row, payloadCell(m.Payload))
		}
		if failed {
			row = append(row, cell(truncate(m.LastError, 100)))
		}
		tw.add(row...)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return s.endList(next, follow)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// payloadCell renders a payload on one line of a table: as text when it is
// printable UTF-8, else in hex ("0x..."), clipped to about 200 bytes.
func payloadCell(b []byte) string {
	if len(b) == 0 {
		return "-"
	}
	if utf8.Valid(b) && !strings.ContainsFunc(string(b), func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) {
		return truncate(string(b), 200)
	}
	if len(b) > 100 {
		return "0x" + hex.EncodeToString(b[:100]) + "..."
	}
	return "0x" + hex.EncodeToString(b)
}

// ---- redrive, purge ----

func redriveFlags(fs *flag.FlagSet) runner {
	var o mq.RedriveOptions
	fs.StringVar(&o.RoutingKey, "key", "", "move only the dead letters of this routing key")
	ids := idsFlag(fs, "move")
	fs.StringVar(&o.To, "to", "", "move them to this queue instead of the queue each came from")
	b := bulkFlags(fs, "dead letters per page, each page moved in one transaction", mq.DefaultPeek, mq.MaxPeek)
	return func(ctx context.Context, s *session, args []string) error {
		a, err := s.queueAdmin()
		if err != nil {
			return err
		}
		if len(*ids) > 0 {
			o.IDs = *ids
			n, err := a.Redrive(ctx, args[0], o)
			if err != nil {
				return err
			}
			return s.moved(args[0], o.To, n, nil)
		}
		st, err := s.queueStats(ctx, args[0], o.RoutingKey)
		if err != nil {
			return err
		}
		moved := 0
		w := s.walk(b, "dead letters", func() string { return fmt.Sprintf("%d moved", moved) })
		w.total = tally{n: st.Ready + st.Delayed + st.Locked}
		peek := mq.PeekOptions{RoutingKey: o.RoutingKey, Limit: b.batch}
		err = w.run(ctx, func(ctx context.Context) (int, bool, error) {
			page, err := a.Peek(ctx, args[0], peek)
			if err != nil || len(page) == 0 {
				return 0, false, err
			}
			o.IDs = make([]int64, len(page))
			for i, m := range page {
				o.IDs[i] = m.ID
			}
			n, err := a.Redrive(context.WithoutCancel(ctx), args[0], o) // a page started is finished: the count is exact
			moved += n
			peek.AfterID = page[len(page)-1].ID
			return len(page), len(page) == peek.Limit, err
		})
		return w.report(err, func() error { return s.moved(args[0], o.To, moved, w.fields()) })
	}
}

// moved prints what redrive moved: n messages from queue to to (each one's origin
// when empty), with fields in its JSON.
func (s *session) moved(queue, to string, n int, fields map[string]any) error {
	v := map[string]any{"queue": queue, "moved": n}
	dest := "the queue each came from"
	if to != "" {
		v["to"], dest = to, cell(to)
	}
	maps.Copy(v, fields)
	return s.emit(v, func(w io.Writer) {
		fmt.Fprintf(w, "moved %d %s from %s to %s\n", n, plural(n, "message"), cell(queue), dest)
	})
}

func purgeFlags(fs *flag.FlagSet) runner {
	var o mq.PurgeOptions
	fs.StringVar(&o.RoutingKey, "key", "", "delete only the messages of this routing key")
	ids := idsFlag(fs, "delete")
	yes := fs.Bool("yes", false, "confirm the deletion (without it, purge says what it would delete)")
	return func(ctx context.Context, s *session, args []string) error {
		a, err := s.queueAdmin()
		if err != nil {
			return err
		}
		o.IDs = *ids
		if !*yes {
			return s.refusePurge(ctx, args[0], o)
		}
		n, err := a.Purge(ctx, args[0], o)
		if err != nil {
			return err
		}
		return s.emit(map[string]any{"queue": args[0], "deleted": n}, func(w io.Writer) {
			fmt.Fprintf(w, "deleted %d %s from %s\n", n, plural(n, "message"), cell(args[0]))
		})
	}
}

// refusePurge is the usage error of a purge without -yes, saying what it would
// delete.
func (s *session) refusePurge(ctx context.Context, queue string, o mq.PurgeOptions) error {
	st, err := s.queueStats(ctx, queue, o.RoutingKey)
	if err != nil {
		return err
	}
	n := st.Ready + st.Delayed + st.Locked
	what := fmt.Sprintf("all %d %s of queue %q", n, plural(n, "message"), clip(queue))
	if o.RoutingKey != "" {
		what = fmt.Sprintf("all %d %s of key %q in queue %q", n, plural(n, "message"), clip(o.RoutingKey), clip(queue))
	}
	if len(o.IDs) > 0 {
		ids := make([]string, len(o.IDs))
		for i, id := range o.IDs {
			ids[i] = strconv.FormatInt(id, 10)
		}
		what = fmt.Sprintf("the messages with ids %s among %s", truncate(strings.Join(ids, ", "), 200), strings.TrimPrefix(what, "all "))
	}
	if st.Locked > 0 {
		what += fmt.Sprintf(", %d of them locked by a consumer", st.Locked)
	}
	note := ""
	if queue == "orchestrator" || queue == "worker" {
		note = " (the runtime's " + queue + " queue: the instances whose messages are deleted never get them)"
	}
	return usageError(fmt.Sprintf("refusing to delete without -yes: this would delete %s%s; run it again with -yes to delete them", what, note))
}

// ---- pause, resume ----

// pauseRunner is pause, or with paused false resume: the state is stored with the
// messages, so it holds for every process of the database until changed.
func pauseRunner(paused bool) runner {
	return func(ctx context.Context, s *session, args []string) error {
		a, err := s.queueAdmin()
		if err != nil {
			return err
		}
		set := a.Resume
		if paused {
			set = a.Pause
		}
		if err := set(ctx, args[0]); err != nil {
			return err
		}
		return s.emit(map[string]any{"queue": args[0], "paused": paused}, func(w io.Writer) {
			if paused {
				fmt.Fprintf(w, "paused queue %s: its consumers receive none of its messages until it is resumed\n", cell(args[0]))
			} else {
				fmt.Fprintf(w, "resumed queue %s\n", cell(args[0]))
			}
		})
	}
}

// ---- limit, limits ----

// limitJSON is a limit as limit and limits print it with -json.
type limitJSON struct {
	Queue       string `json:"queue"`
	Group       string `json:"group,omitempty"`
	MaxInFlight int    `json:"max_in_flight,omitempty"`
	Rate        int    `json:"rate,omitempty"`
	Per         string `json:"per,omitempty"`
	InFlight    *int   `json:"in_flight,omitempty"`
}

func limitView(queue string, li mq.LimitInfo, inFlight bool) limitJSON {
	v := limitJSON{Queue: queue, Group: li.Group, MaxInFlight: li.MaxInFlight, Rate: li.Rate}
	if li.Per > 0 {
		v.Per = li.Per.String()
	}
	if inFlight {
		v.InFlight = &li.InFlight
	}
	return v
}

// describe says what the limit allows, in words.
func (v limitJSON) describe() string {
	var parts []string
	if v.MaxInFlight > 0 {
		batches := "batches"
		if v.MaxInFlight == 1 {
			batches = "batch"
		}
		parts = append(parts, fmt.Sprintf("at most %d %s in flight", v.MaxInFlight, batches))
	}
	if v.Rate > 0 {
		parts = append(parts, fmt.Sprintf("%d %s per %s", v.Rate, plural(v.Rate, "message"), v.Per))
	}
	if len(parts) == 0 {
		return "no limit"
	}
	return strings.Join(parts, ", ")
}

func (v limitJSON) subject() string {
	if v.Group == "" {
		return "queue " + cell(v.Queue)
	}
	return "group " + cell(v.Group) + " of queue " + cell(v.Queue)
}

func limitFlags(fs *flag.FlagSet) runner {
	var (
		group string
		l     mq.Limit
	)
	fs.StringVar(&group, "group", "", "limit this limit group (Message.LimitGroup) instead of the whole queue")
	fs.IntVar(&l.MaxInFlight, "max-in-flight", 0, "the most batches held at once (0: no bound)")
	fs.IntVar(&l.Rate, "rate", 0, "the most messages delivered per -per (0: no bound)")
	fs.DurationVar(&l.Per, "per", 0, "the interval of -rate, e.g. 1s or 1m")
	remove := fs.Bool("remove", false, "remove the limit")
	return func(ctx context.Context, s *session, args []string) error {
		if *remove != (l == mq.Limit{}) {
			return usageError("give -max-in-flight and/or -rate with -per, or -remove alone")
		}
		a, err := s.queueAdmin()
		if err != nil {
			return err
		}
		if err := a.SetLimit(ctx, args[0], group, l); err != nil {
			return err
		}
		v := limitView(args[0], mq.LimitInfo{Group: group, Limit: l}, false)
		return s.emit(v, func(w io.Writer) {
			if *remove {
				fmt.Fprintf(w, "removed the limit of %s\n", v.subject())
			} else {
				fmt.Fprintf(w, "limited %s in every process: %s\n", v.subject(), v.describe())
			}
		})
	}
}

func listLimits(ctx context.Context, s *session, args []string) error {
	a, err := s.queueAdmin()
	if err != nil {
		return err
	}
	ls, err := a.Limits(ctx, args[0])
	if err != nil {
		return err
	}
	views := make([]limitJSON, len(ls))
	for i, li := range ls {
		views[i] = limitView(args[0], li, true)
	}
	return s.emit(map[string][]limitJSON{"limits": views}, func(w io.Writer) {
		fmt.Fprintln(w, "GROUP\tMAX IN FLIGHT\tIN FLIGHT\tRATE")
		for _, v := range views {
			group, most, rate := "(queue)", "-", "-"
			if v.Group != "" {
				group = cell(v.Group)
			}
			if v.MaxInFlight > 0 {
				most = strconv.Itoa(v.MaxInFlight)
			}
			if v.Rate > 0 {
				rate = fmt.Sprintf("%d per %s", v.Rate, v.Per)
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", group, most, *v.InFlight, rate)
		}
	})
}

// plural is noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}
