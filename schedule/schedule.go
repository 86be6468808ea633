package schedule

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/robfig/cron/v3"

	"github.com/duroq/duroq/mq"
)

// Limits and defaults.
const (
	// DefaultQueue is the queue that holds the schedules when ManagerOptions.Queue
	// and SchedulerOptions.Queue are empty.
	DefaultQueue = "duroq.schedules"
	// MaxIDSize is the longest schedule id, in bytes: a slot id (the id, "@" and
	// the slot's time) must fit a message key and an instance id.
	MaxIDSize = 200
	// MaxSpecSize is the longest Cron expression or TimeZone name, in bytes.
	MaxSpecSize = 256
	// MaxTargetSize is the largest EnqueueTarget.Payload or OrchestrationTarget.Input,
	// in bytes: it is stored in the schedule's own message.
	MaxTargetSize = 1 << 20
	// MinEvery is the shortest interval of an Every schedule.
	MinEvery = time.Second
	// MaxJitter is the largest Jitter.
	MaxJitter = 24 * time.Hour
	// DefaultCatchupWindow is the CatchupWindow of a schedule that leaves it zero.
	DefaultCatchupWindow = time.Minute
	// DefaultMaxCatchup is the MaxCatchup of a schedule that leaves it zero.
	DefaultMaxCatchup = 100
	// MaxCatchupLimit is the largest MaxCatchup.
	MaxCatchupLimit = 1000
)

// CatchupPolicy says which of the slots that passed while no Scheduler could fire
// them (downtime, a paused Run, a failing target) fire when one can again.
type CatchupPolicy string

// The catch-up policies.
const (
	// CatchupSkip fires the latest passed slot only if it is at most Jitter +
	// CatchupWindow late; the others are skipped. On time, every slot fires.
	CatchupSkip CatchupPolicy = "skip"
	// CatchupOne fires the latest passed slot, however late, once; the earlier
	// ones are skipped. The default.
	CatchupOne CatchupPolicy = "one"
	// CatchupAll fires every passed slot, oldest first, but at most MaxCatchup of
	// them (the latest): older ones are skipped.
	CatchupAll CatchupPolicy = "all"
)

// OverlapPolicy says whether an orchestration slot starts while the instance of the
// previous slot still runs. It does not apply to EnqueueTarget: a queue message
// has no end the scheduler could wait for.
type OverlapPolicy string

// The overlap policies.
const (
	// OverlapAllow starts every slot's instance, running or not. The default.
	OverlapAllow OverlapPolicy = "allow"
	// OverlapSkip skips a slot while the instance last started by the schedule is
	// still running (SchedulerOptions.Running tells).
	OverlapSkip OverlapPolicy = "skip"
)

// Schedule is a schedule's definition: when it fires (Cron or Every) and what each
// firing does (Enqueue or Orchestration). Each slot (an instant the definition
// names) fires at most once whatever the number of Schedulers, and once unless
// the catch-up or overlap policy skips it.
type Schedule struct {
	// ID names the schedule; required, at most MaxIDSize bytes of printable UTF-8.
	// It is unique among the schedules of a queue.
	ID string

	// Cron is a cron expression: 5 fields (minute hour day-of-month month
	// day-of-week), or 6 with a leading seconds field, or a descriptor (@yearly,
	// @monthly, @weekly, @daily, @midnight, @hourly), read in TimeZone. Exactly
	// one of Cron and Every is set.
	Cron string
	// TimeZone is the IANA name of the zone Cron is read in (e.g. "Europe/Paris");
	// empty means UTC. Every process running a Scheduler needs the zone database
	// (or to import time/tzdata). Only for Cron.
	TimeZone string
	// Every makes the slots Anchor + k·Every for every integer k: absolute
	// instants, unaffected by time zones and daylight saving. A whole number of
	// seconds, at least MinEvery.
	Every time.Duration
	// Anchor sets the phase of Every (the zero value means the Unix epoch, so an
	// hourly interval fires on the hour UTC); a whole second between the years
	// 1970 and 2200. Only for Every.
	Anchor time.Time

	// Jitter delays each firing by a uniform random duration in [0, Jitter), to
	// spread schedules that share a slot; the slot, and so its slot id, does not
	// move. At most MaxJitter, and less than Every; keep it below the gap between
	// two slots, else a firing may run after the next slot and the catch-up
	// policy decides which of them fire.
	Jitter time.Duration
	// Catchup is the catch-up policy; empty means CatchupOne.
	Catchup CatchupPolicy
	// CatchupWindow is how late, beyond Jitter, a slot may still fire under
	// CatchupSkip; zero means DefaultCatchupWindow.
	CatchupWindow time.Duration
	// MaxCatchup bounds the slots CatchupAll fires after downtime; zero means
	// DefaultMaxCatchup, at most MaxCatchupLimit.
	MaxCatchup int
	// Overlap is the overlap policy of an Orchestration target; empty means
	// OverlapAllow.
	Overlap OverlapPolicy

	// Enqueue, when set, makes each firing enqueue a message. Exactly one of
	// Enqueue and Orchestration is set.
	Enqueue *EnqueueTarget
	// Orchestration, when set, makes each firing start an orchestration instance.
	Orchestration *OrchestrationTarget
}

// EnqueueTarget is the message a firing enqueues, in the same atomic step that
// reschedules the schedule: exactly once per slot. The message's Key is the slot
// id (see SlotID), which tells its consumer which slot it is for
// (Delivery.Key; ParseSlotID reads it).
type EnqueueTarget struct {
	Queue      string // required; not the schedules' own queue
	RoutingKey string // optional, see mq.Message
	Tag        string // optional, see mq.Message
	Payload    []byte // at most MaxTargetSize bytes
}

// OrchestrationTarget is the orchestration a firing starts, with the slot id as its
// instance id: a firing run twice (its Scheduler crashed before settling it)
// starts the same instance, which the runtime ignores, so each slot starts one
// instance.
type OrchestrationTarget struct {
	Name  string // the orchestration's name; required
	Input string // its input, at most MaxTargetSize bytes
}

// SlotID is the id of the slot of schedule id at slot: the id, "@" and the slot's
// time in RFC 3339 UTC, e.g. "nightly@2026-01-02T03:00:00Z". Every process
// computes the same id for a slot, and as slots are whole seconds the slot ids of
// a schedule sort in time order.
func SlotID(id string, slot time.Time) string {
	return id + "@" + slot.UTC().Format(time.RFC3339Nano)
}

// ParseSlotID splits a slot id into its schedule id and slot time.
func ParseSlotID(slotID string) (id string, slot time.Time, err error) {
	i := strings.LastIndexByte(slotID, '@')
	if i < 0 {
		return "", time.Time{}, invalid("parse slot id", "", "slot id", fmt.Sprintf("%q has no @", mq.Clip(slotID)))
	}
	slot, err = time.Parse(time.RFC3339Nano, slotID[i+1:])
	if err != nil {
		return "", time.Time{}, invalid("parse slot id", "", "slot id", fmt.Sprintf("%q: the time is not RFC 3339", mq.Clip(slotID)))
	}
	return slotID[:i], slot, nil
}

// slots computes a schedule's slots.
type slots interface {
	// next returns the first slot strictly after t, or the zero time when there is
	// none within five years (a cron expression can name one that far away).
	next(t time.Time) time.Time
	// latest returns the latest n slots in [from, to], oldest first.
	latest(from, to time.Time, n int) []time.Time
}

// interval is an Every schedule's slots: anchor + k·every.
type interval struct {
	anchor time.Time
	every  time.Duration
}

// index is the k of the latest slot at or before t.
func (iv interval) index(t time.Time) int64 {
	d := t.Sub(iv.anchor) // the anchor's range keeps this far from saturating
	k := int64(d / iv.every)
	if d%iv.every < 0 {
		k--
	}
	return k
}

func (iv interval) at(k int64) time.Time { return iv.anchor.Add(time.Duration(k) * iv.every).UTC() }

func (iv interval) next(t time.Time) time.Time { return iv.at(iv.index(t) + 1) }

func (iv interval) latest(from, to time.Time, n int) []time.Time {
	first, last := iv.index(from), iv.index(to)
	if iv.at(first).Before(from) {
		first++
	}
	first = max(first, last-int64(n)+1)
	var out []time.Time
	for k := first; k <= last; k++ {
		out = append(out, iv.at(k))
	}
	return out
}

// cronSlots is a Cron schedule's slots.
type cronSlots struct{ s *cron.SpecSchedule }

func (c cronSlots) next(t time.Time) time.Time { return c.s.Next(t).UTC() }

// latest walks the slots of a window ending at to that doubles until it holds n
// slots or reaches from: cron has no "previous slot", and walking from from
// would cost every slot of a long downtime.
func (c cronSlots) latest(from, to time.Time, n int) []time.Time {
	for w := time.Minute; ; w *= 2 {
		start := to.Add(-w)
		whole := !start.After(from)
		if whole {
			start = from
		}
		var out []time.Time
		for t := c.s.Next(start.Add(-time.Nanosecond)); !t.IsZero() && !t.After(to); t = c.s.Next(t) {
			if out = append(out, t.UTC()); len(out) > n {
				out = out[1:]
			}
		}
		if len(out) == n || whole {
			return out
		}
	}
}

// cronParser reads 5 fields, 6 with seconds, or a descriptor.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

var (
	minAnchor = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	maxAnchor = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// normalize checks s for op and returns it with its defaults filled in, and its
// slots. queue is the schedules' queue, which an EnqueueTarget must not name.
func (s Schedule) normalize(op, queue string) (Schedule, slots, error) {
	bad := func(field, reason string) (Schedule, slots, error) {
		return Schedule{}, nil, invalid(op, s.ID, field, reason)
	}
	if err := checkID(op, s.ID); err != nil {
		return Schedule{}, nil, err
	}
	var sl slots
	switch {
	case s.Cron == "" && s.Every == 0:
		return bad("Cron", "set Cron or Every")
	case s.Cron != "" && s.Every != 0:
		return bad("Every", "set Cron or Every, not both")
	case s.Cron != "":
		if !s.Anchor.IsZero() {
			return bad("Anchor", "only for Every")
		}
		if len(s.Cron) > MaxSpecSize {
			return bad("Cron", fmt.Sprintf("%d bytes exceeds the limit of %d", len(s.Cron), MaxSpecSize))
		}
		// The zone is TimeZone, and "@every" slots would move with each firing.
		spec := strings.TrimSpace(s.Cron)
		if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
			return bad("Cron", "name the zone in TimeZone, not in the expression")
		}
		if strings.HasPrefix(spec, "@every") {
			return bad("Cron", "use Every for fixed intervals")
		}
		parsed, err := cronParser.Parse(spec)
		if err != nil {
			return bad("Cron", mq.Clip(err.Error()))
		}
		loc := time.UTC
		if s.TimeZone != "" {
			if len(s.TimeZone) > MaxSpecSize {
				return bad("TimeZone", fmt.Sprintf("%d bytes exceeds the limit of %d", len(s.TimeZone), MaxSpecSize))
			}
			if s.TimeZone == "Local" {
				return bad("TimeZone", `"Local" differs between processes: name an IANA zone`)
			}
			if loc, err = time.LoadLocation(s.TimeZone); err != nil {
				return bad("TimeZone", fmt.Sprintf("unknown time zone %q", mq.Clip(s.TimeZone)))
			}
		}
		spec6 := parsed.(*cron.SpecSchedule) // @every, the only other kind, is refused above
		spec6.Location = loc
		sl = cronSlots{spec6}
		s.Cron, s.TimeZone = spec, loc.String()
	default:
		switch {
		case s.TimeZone != "":
			return bad("TimeZone", "only for Cron: Every's slots are absolute")
		case s.Every < MinEvery || s.Every%time.Second != 0:
			return bad("Every", fmt.Sprintf("%v is not a whole number of seconds of at least %v", s.Every, MinEvery))
		case s.Anchor.IsZero():
			s.Anchor = minAnchor
		case s.Anchor.Before(minAnchor) || !s.Anchor.Before(maxAnchor) || s.Anchor.Nanosecond() != 0:
			return bad("Anchor", fmt.Sprintf("%s is not a whole second between the years 1970 and 2200", s.Anchor.UTC().Format(time.RFC3339Nano)))
		}
		if s.Jitter >= s.Every {
			return bad("Jitter", fmt.Sprintf("%v is not shorter than Every (%v)", s.Jitter, s.Every))
		}
		s.Anchor = s.Anchor.UTC()
		sl = interval{s.Anchor, s.Every}
	}
	switch {
	case s.Jitter < 0:
		return bad("Jitter", fmt.Sprintf("negative duration %v", s.Jitter))
	case s.Jitter > MaxJitter:
		return bad("Jitter", fmt.Sprintf("%v exceeds %v", s.Jitter, MaxJitter))
	case s.CatchupWindow < 0:
		return bad("CatchupWindow", fmt.Sprintf("negative duration %v", s.CatchupWindow))
	case s.CatchupWindow == 0:
		s.CatchupWindow = DefaultCatchupWindow
	}
	switch s.Catchup {
	case "":
		s.Catchup = CatchupOne
	case CatchupSkip, CatchupOne, CatchupAll:
	default:
		return bad("Catchup", fmt.Sprintf("%q (want %q, %q or %q)", mq.Clip(string(s.Catchup)), CatchupSkip, CatchupOne, CatchupAll))
	}
	switch {
	case s.MaxCatchup < 0 || s.MaxCatchup > MaxCatchupLimit:
		return bad("MaxCatchup", fmt.Sprintf("%d (want 0 to %d)", s.MaxCatchup, MaxCatchupLimit))
	case s.MaxCatchup == 0:
		s.MaxCatchup = DefaultMaxCatchup
	}
	switch s.Overlap {
	case "":
		s.Overlap = OverlapAllow
	case OverlapAllow, OverlapSkip:
	default:
		return bad("Overlap", fmt.Sprintf("%q (want %q or %q)", mq.Clip(string(s.Overlap)), OverlapAllow, OverlapSkip))
	}
	switch e, o := s.Enqueue, s.Orchestration; {
	case e == nil && o == nil:
		return bad("Enqueue", "set a target: Enqueue or Orchestration")
	case e != nil && o != nil:
		return bad("Orchestration", "set one target, Enqueue or Orchestration, not both")
	case e != nil:
		if s.Overlap != OverlapAllow {
			return bad("Overlap", "only for an Orchestration target: a queue message has no end to wait for")
		}
		// The message is checked as the queue will check it, with the longest slot id
		// as its key, so that no firing can fail on it.
		m := mq.Message{Queue: e.Queue, RoutingKey: e.RoutingKey, Tag: e.Tag, Key: SlotID(s.ID, maxAnchor)}
		if err := mq.CheckMessages(op, []mq.Message{m}); err != nil {
			return bad("Enqueue", strings.TrimPrefix(err.Error(), "mq: "+op+": message 0: "))
		}
		if e.Queue == queue {
			return bad("Enqueue.Queue", fmt.Sprintf("%q is the schedules' own queue", mq.Clip(queue)))
		}
		if len(e.Payload) > MaxTargetSize {
			return bad("Enqueue.Payload", fmt.Sprintf("%d bytes exceeds the limit of %d", len(e.Payload), MaxTargetSize))
		}
		cp := *e
		s.Enqueue = &cp
	default:
		if o.Name == "" {
			return bad("Orchestration.Name", "must not be empty")
		}
		if len(o.Name) > mq.MaxNameSize || !utf8.ValidString(o.Name) {
			return bad("Orchestration.Name", fmt.Sprintf("want valid UTF-8 of at most %d bytes", mq.MaxNameSize))
		}
		if len(o.Input) > MaxTargetSize {
			return bad("Orchestration.Input", fmt.Sprintf("%d bytes exceeds the limit of %d", len(o.Input), MaxTargetSize))
		}
		cp := *o
		s.Orchestration = &cp
	}
	return s, sl, nil
}

// checkID checks a schedule id for op.
func checkID(op, id string) error {
	switch {
	case id == "":
		return invalid(op, "", "ID", "must not be empty")
	case len(id) > MaxIDSize:
		return invalid(op, id, "ID", fmt.Sprintf("%d bytes exceeds the limit of %d", len(id), MaxIDSize))
	case !utf8.ValidString(id) || strings.ContainsFunc(id, func(r rune) bool { return !unicode.IsPrint(r) }):
		return invalid(op, id, "ID", "must be printable UTF-8")
	}
	return nil
}
