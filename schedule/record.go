package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/duroq/duroq/mq"
)

// recordVersion is the version of the stored form this package writes and reads.
const recordVersion = 1

// record is a schedule as stored: the payload of its one message in the schedules'
// queue, JSON so that an operator peeking at the queue can read it.
type record struct {
	V             int                  `json:"v"`
	ID            string               `json:"id"`
	Cron          string               `json:"cron,omitempty"`
	TimeZone      string               `json:"time_zone,omitempty"`
	Every         duration             `json:"every,omitzero"`
	Anchor        time.Time            `json:"anchor,omitzero"`
	Jitter        duration             `json:"jitter,omitzero"`
	Catchup       CatchupPolicy        `json:"catchup"`
	CatchupWindow duration             `json:"catchup_window"`
	MaxCatchup    int                  `json:"max_catchup"`
	Overlap       OverlapPolicy        `json:"overlap"`
	Enqueue       *enqueueRecord       `json:"enqueue,omitempty"`
	Orchestration *orchestrationRecord `json:"orchestration,omitempty"`

	// Next is the next slot to fire (while paused, the one it was at).
	Next time.Time `json:"next"`
	// Paused: the message waits far in the future and fires nothing.
	Paused bool `json:"paused,omitempty"`
	// LastInstance is the instance the last started slot started (OverlapSkip).
	LastInstance string `json:"last_instance,omitempty"`
}

type enqueueRecord struct {
	Queue      string `json:"queue"`
	RoutingKey string `json:"routing_key,omitempty"`
	Tag        string `json:"tag,omitempty"`
	Payload    []byte `json:"payload,omitempty"`
}

type orchestrationRecord struct {
	Name  string `json:"name"`
	Input string `json:"input,omitempty"`
}

// duration is a time.Duration stored as Go writes it ("1h30m0s").
type duration time.Duration

func (d duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = duration(v)
	return err
}

// newRecord is the stored form of s (normalized) at slot next.
func newRecord(s Schedule, next time.Time) *record {
	r := &record{V: recordVersion, ID: s.ID, Cron: s.Cron, Every: duration(s.Every), Jitter: duration(s.Jitter),
		Catchup: s.Catchup, CatchupWindow: duration(s.CatchupWindow), MaxCatchup: s.MaxCatchup, Overlap: s.Overlap, Next: next.UTC()}
	if s.Cron != "" {
		r.TimeZone = s.TimeZone
	} else {
		r.Anchor = s.Anchor
	}
	if e := s.Enqueue; e != nil {
		r.Enqueue = &enqueueRecord{e.Queue, e.RoutingKey, e.Tag, e.Payload}
	}
	if o := s.Orchestration; o != nil {
		r.Orchestration = &orchestrationRecord{o.Name, o.Input}
	}
	return r
}

// schedule is the definition r stores.
func (r *record) schedule() Schedule {
	s := Schedule{ID: r.ID, Cron: r.Cron, TimeZone: r.TimeZone, Every: time.Duration(r.Every), Anchor: r.Anchor,
		Jitter: time.Duration(r.Jitter), Catchup: r.Catchup, CatchupWindow: time.Duration(r.CatchupWindow),
		MaxCatchup: r.MaxCatchup, Overlap: r.Overlap}
	if e := r.Enqueue; e != nil {
		s.Enqueue = &EnqueueTarget{e.Queue, e.RoutingKey, e.Tag, e.Payload}
	}
	if o := r.Orchestration; o != nil {
		s.Orchestration = &OrchestrationTarget{o.Name, o.Input}
	}
	return s
}

// decode reads the record of the message keyed key in queue, checks it as Create
// would, and returns it with its slots. Anything wrong is ErrUnreadable.
func decode(queue, key string, payload []byte) (*record, slots, error) {
	unreadable := func(detail string) (*record, slots, error) {
		return nil, nil, &opError{op: "read", id: key, kind: ErrUnreadable, detail: detail}
	}
	var r record
	if err := json.Unmarshal(payload, &r); err != nil {
		return unreadable(mq.Clip(err.Error()))
	}
	if r.V != recordVersion {
		return unreadable(fmt.Sprintf("version %d (this build reads version %d)", r.V, recordVersion))
	}
	if r.ID != key {
		return unreadable(fmt.Sprintf("it records the id %q", mq.Clip(r.ID)))
	}
	_, sl, err := r.schedule().normalize("read", queue)
	if ie := (*InvalidError)(nil); errors.As(err, &ie) {
		return unreadable(ie.Field + ": " + ie.Reason)
	} else if err != nil {
		return unreadable(err.Error())
	}
	return &r, sl, nil
}

// message is r's message in queue, visible after delay (at once if negative). Its
// message key makes the id unique in the queue; its routing key lets Peek find it.
func (r *record) message(queue string, delay time.Duration) (mq.Message, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return mq.Message{}, fmt.Errorf("schedule %q: encode: %w", mq.Clip(r.ID), err)
	}
	return mq.Message{Queue: queue, RoutingKey: r.ID, Key: r.ID, Payload: b, Delay: max(0, delay)}, nil
}
