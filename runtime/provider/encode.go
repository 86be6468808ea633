package provider

import (
	"bytes"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// Events and work items are encoded field by field, not through msgpack's
// reflection: msgpack.Marshal boxed every field to test it for emptiness and built
// a list of the non-empty ones, so an event took about fifteen allocations and was
// a twentieth of a worker's CPU under duroq bench seq. The bytes are the same as
// msgpack.Marshal's (a map of the non-empty fields in declaration order, integers
// at their full width), which TestEncodeMatchesMsgpack checks for every field.

// fieldWriter writes the fields of one struct: each non-empty one as its name and
// value, counting them for the map header written in front (see encode).
type fieldWriter struct {
	enc *msgpack.Encoder
	buf bytes.Buffer
	n   int
	err error
}

// maxPooledBuffer bounds the buffer a pooled fieldWriter keeps.
const maxPooledBuffer = 64 << 10

var fieldWriters = sync.Pool{New: func() any {
	w := &fieldWriter{}
	w.enc = msgpack.NewEncoder(&w.buf)
	return w
}}

// encode returns formatV1 and the map of the fields fields writes.
func encode(what string, fields func(w *fieldWriter)) ([]byte, error) {
	w := fieldWriters.Get().(*fieldWriter)
	defer func() {
		if w.buf.Cap() <= maxPooledBuffer { // a rare huge event's buffer is left to the collector
			fieldWriters.Put(w)
		}
	}()
	w.buf.Reset()
	w.n, w.err = 0, nil
	fields(w)
	if w.err != nil {
		return nil, encodeError(what, w.err)
	}
	out := make([]byte, 0, 1+5+w.buf.Len())
	out = mapHeader(append(out, formatV1), w.n)
	return append(out, w.buf.Bytes()...), nil
}

// mapHeader appends the msgpack header of a map of n entries.
func mapHeader(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= 0xffff:
		return append(b, 0xde, byte(n>>8), byte(n))
	default:
		return append(b, 0xdf, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

func (w *fieldWriter) key(name string) {
	w.n++
	w.keep(w.enc.EncodeString(name))
}

func (w *fieldWriter) keep(err error) {
	if w.err == nil {
		w.err = err
	}
}

// str writes a string field; omitEmpty leaves out "".
func (w *fieldWriter) str(name, v string, omitEmpty bool) {
	if omitEmpty && v == "" {
		return
	}
	w.key(name)
	w.keep(w.enc.EncodeString(v))
}

// u64 writes a uint64 field; omitEmpty leaves out 0.
func (w *fieldWriter) u64(name string, v uint64, omitEmpty bool) {
	if omitEmpty && v == 0 {
		return
	}
	w.key(name)
	w.keep(w.enc.EncodeUint64(v))
}

// i64 writes an int64 field, leaving out 0 (every such field is omitempty).
func (w *fieldWriter) i64(name string, v int64) {
	if v == 0 {
		return
	}
	w.key(name)
	w.keep(w.enc.EncodeInt64(v))
}

// strPtr writes a *string field, leaving out nil.
func (w *fieldWriter) strPtr(name string, v *string) {
	if v == nil {
		return
	}
	w.key(name)
	w.keep(w.enc.EncodeString(*v))
}

// value writes a rarely set field through msgpack's reflection unless empty.
func (w *fieldWriter) value(name string, v any, empty bool) {
	if empty {
		return
	}
	w.key(name)
	w.keep(w.enc.Encode(v))
}

// fields writes e's fields in declaration order, as their msgpack tags say.
func (e *Event) fields(w *fieldWriter) {
	w.str("k", string(e.Kind), false)
	w.u64("id", e.EventID, false)
	w.u64("src", e.SourceEventID, true)
	w.str("i", e.InstanceID, true)
	w.u64("x", e.ExecutionID, true)
	w.i64("ts", e.TimestampMs)
	w.str("rv", e.RuntimeVersion, true)
	w.str("name", e.Name, true)
	w.str("ver", e.Version, true)
	w.str("in", e.Input, true)
	w.str("out", e.Output, true)
	w.str("res", e.Result, true)
	w.str("data", e.Data, true)
	w.str("why", e.Reason, true)
	w.str("inst", e.Instance, true)
	w.str("pi", e.ParentInstance, true)
	w.u64("pid", e.ParentID, true)
	w.u64("px", e.ParentExecutionID, true)
	w.str("sess", e.SessionID, true)
	w.str("tag", e.Tag, true)
	w.i64("fire", e.FireAtMs)
	w.value("err", e.Details, e.Details == nil)
	w.strPtr("cs", e.Status)
	w.str("key", e.Key, true)
	w.str("val", e.Value, true)
	w.i64("kvts", e.LastUpdatedAtMs)
	w.value("cf", e.CarryForward, len(e.CarryForward) == 0)
	w.strPtr("ics", e.InitialCustomStatus)
	w.str("tp", e.TraceParent, true)
}

// fields writes w's fields in declaration order, as their msgpack tags say.
func (it *WorkItem) fields(w *fieldWriter) {
	w.str("k", string(it.Kind), false)
	w.str("i", it.Instance, true)
	w.u64("x", it.ExecutionID, true)
	w.u64("id", it.ID, true)
	w.str("name", it.Name, true)
	w.str("ver", it.Version, true)
	w.str("in", it.Input, true)
	w.str("res", it.Result, true)
	w.str("data", it.Data, true)
	w.str("why", it.Reason, true)
	w.str("pi", it.ParentInstance, true)
	w.u64("pid", it.ParentID, true)
	w.u64("px", it.ParentExecutionID, true)
	w.str("sess", it.SessionID, true)
	w.str("tag", it.Tag, true)
	w.i64("fire", it.FireAtMs)
	w.value("err", it.Details, it.Details == nil)
	w.value("cf", it.CarryForward, len(it.CarryForward) == 0)
	w.strPtr("ics", it.InitialCustomStatus)
	w.str("tp", it.TraceParent, true)
}
