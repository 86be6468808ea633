package provider

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// plainEvent and plainWorkItem have the fields and tags of Event and WorkItem
// without their methods: msgpack encodes them by reflection.
type (
	plainEvent    Event
	plainWorkItem WorkItem
)

// sample sets v (a field) to a value that is not empty.
func sample(t *testing.T, v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("value of " + v.Type().Name() + " \u00e9\x00 " + string(bytes.Repeat([]byte("x"), 40)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Uint64, reflect.Uint32:
		v.SetUint(1<<31 + 7)
	case reflect.Int64:
		v.SetInt(-1 << 40)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		if p.Elem().Kind() == reflect.Struct {
			for i := range p.Elem().NumField() {
				if i%2 == 0 {
					sample(t, p.Elem().Field(i))
				}
			}
		}
		v.Set(p) // a *string to "": set, so written
	case reflect.Slice:
		v.Set(reflect.ValueOf([]NameData{{Name: "q", Data: "d"}, {Name: "", Data: "second"}}))
	default:
		t.Fatalf("no sample for a field of kind %v: extend sample and the encoder", v.Kind())
	}
}

// variants returns the zero value of a struct type, one value for each field with
// only that field set, one with every field set, and edge cases.
func variants[T any](t *testing.T) []T {
	var zero T
	out := []T{zero}
	var all T
	for i := range reflect.TypeFor[T]().NumField() {
		var one T
		sample(t, reflect.ValueOf(&one).Elem().Field(i))
		sample(t, reflect.ValueOf(&all).Elem().Field(i))
		out = append(out, one)
	}
	return append(out, all)
}

func TestEncodeMatchesMsgpack(t *testing.T) {
	check := func(t *testing.T, got []byte, err error, want any) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		w, err := msgpack.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != formatV1 || !bytes.Equal(got[1:], w) {
			t.Fatalf("encoded %+v as\n%x\nmsgpack.Marshal gives\n%x", want, got, w)
		}
	}
	t.Run("Event", func(t *testing.T) {
		events := variants[Event](t)
		events = append(events, Event{Kind: EventActivityScheduled, CarryForward: []NameData{}}) // empty, not nil: left out
		for _, e := range events {
			b, err := MarshalEvent(&e)
			check(t, b, err, plainEvent(e))
			back, err := UnmarshalEvent(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(e.CarryForward) == 0 {
				e.CarryForward = nil
			}
			if !reflect.DeepEqual(back, e) {
				t.Fatalf("decoded %+v, encoded %+v", back, e)
			}
		}
	})
	t.Run("WorkItem", func(t *testing.T) {
		for _, it := range variants[WorkItem](t) {
			b, err := MarshalWorkItem(&it)
			check(t, b, err, plainWorkItem(it))
			back, err := UnmarshalWorkItem(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, it) {
				t.Fatalf("decoded %+v, encoded %+v", back, it)
			}
		}
	})
	t.Run("MapHeader", func(t *testing.T) {
		for _, n := range []int{0, 15, 16, 0xffff, 0x10000} {
			var buf bytes.Buffer
			if err := msgpack.NewEncoder(&buf).EncodeMapLen(n); err != nil {
				t.Fatal(err)
			}
			if got := mapHeader(nil, n); !bytes.Equal(got, buf.Bytes()) {
				t.Fatalf("map header of %d: %x, msgpack writes %x", n, got, buf.Bytes())
			}
		}
	})
}

// BenchmarkMarshalEvent encodes a scheduled activity as the runtime writes one,
// field by field (fields) and by msgpack's reflection (reflect), which it replaced.
func BenchmarkMarshalEvent(b *testing.B) {
	e := Event{Kind: EventActivityScheduled, EventID: 2, InstanceID: "seq-000123", ExecutionID: 1, TimestampMs: 1_790_000_000_000,
		RuntimeVersion: "0.1.0", Name: "Step", Input: "0"}
	b.Run("fields", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := MarshalEvent(&e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reflect", func(b *testing.B) {
		b.ReportAllocs()
		p := plainEvent(e)
		for b.Loop() {
			if _, err := msgpack.Marshal(&p); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestDecodeMatchesMsgpack(t *testing.T) {
	var inputs [][]byte
	for _, e := range variants[Event](t) {
		b, err := MarshalEvent(&e)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, b)
	}
	raw := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{formatV1}, b...)
	}
	inputs = append(inputs,
		[]byte{formatV1, 0xc0}, // nil: the zero value
		raw(map[string]any{"k": "ActivityScheduled", "id": 3, "ts": -5, "x": uint8(1)}),                   // compact integers
		raw(map[string]any{"k": nil, "id": nil, "cs": nil, "ics": "s", "err": nil, "cf": nil, "in": nil}), // nil values
		raw(map[string]any{"k": "X", "unknown": map[string]any{"a": []int{1, 2}}, string(bytes.Repeat([]byte("n"), 40)): "long name"}),
		raw(map[string]any{"id": "not a number"}), // wrong types fail both ways
		raw(map[string]any{"cf": 7}),
		[]byte{formatV1, 0x83, 0xa1, 'k'},                    // truncated
		[]byte{formatV1, 0x81, 0xdb, 0xff, 0xff, 0xff, 0xff}, // a 4 GiB field name
		[]byte{2, 0x80},                                      // another format
		nil,
	)
	for _, b := range inputs {
		got, err := UnmarshalEvent(b)
		var want plainEvent
		wantErr := unmarshalPlain(b, &want)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%x: error %v, msgpack's %v", b, err, wantErr)
		}
		if err != nil {
			if !errors.Is(err, ErrCorruptHistory) {
				t.Fatalf("%x: %v does not match ErrCorruptHistory", b, err)
			}
			continue
		}
		if !reflect.DeepEqual(got, Event(want)) {
			t.Fatalf("%x: decoded\n%+v\nmsgpack decodes\n%+v", b, got, want)
		}
	}
	for _, it := range variants[WorkItem](t) {
		b, err := MarshalWorkItem(&it)
		if err != nil {
			t.Fatal(err)
		}
		got, err := UnmarshalWorkItem(b)
		var want plainWorkItem
		if wantErr := unmarshalPlain(b, &want); err != nil || wantErr != nil {
			t.Fatal(err, wantErr)
		}
		if !reflect.DeepEqual(got, WorkItem(want)) {
			t.Fatalf("decoded\n%+v\nmsgpack decodes\n%+v", got, want)
		}
	}
}

// unmarshalPlain decodes b as UnmarshalEvent did before it read fields itself.
func unmarshalPlain(b []byte, v any) error {
	if len(b) == 0 || b[0] != formatV1 {
		return errors.New("unknown format")
	}
	return msgpack.Unmarshal(b[1:], v)
}

// FuzzDecodeMatchesMsgpack checks that UnmarshalEvent decodes what msgpack's reflection
// decodes, and fails where it fails, but for structs encoded as arrays.
func FuzzDecodeMatchesMsgpack(f *testing.F) {
	e := Event{Kind: EventActivityCompleted, EventID: 4, SourceEventID: 2, Result: "r", Status: new("s")}
	b, err := MarshalEvent(&e)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{formatV1, 0x81, 0xa2, 'i', 'd', 0x05})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1 && (b[1] >= 0x90 && b[1] <= 0x9f || b[1] == 0xdc || b[1] == 0xdd) {
			return // an array: msgpack's reflection takes it as a struct, duroq never writes one
		}
		got, err := UnmarshalEvent(b)
		var want plainEvent
		wantErr := unmarshalPlain(b, &want)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%x: error %v, msgpack's %v", b, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, Event(want)) {
			t.Fatalf("%x: decoded\n%+v\nmsgpack decodes\n%+v", b, got, want)
		}
	})
}

// BenchmarkUnmarshalEvent decodes a completed activity field by field (fields) and by
// msgpack's reflection (reflect), which it replaced.
func BenchmarkUnmarshalEvent(b *testing.B) {
	e := Event{Kind: EventActivityCompleted, EventID: 3, SourceEventID: 2, InstanceID: "seq-000123", ExecutionID: 1,
		TimestampMs: 1_790_000_000_000, RuntimeVersion: "0.1.0", Result: "1"}
	data, err := MarshalEvent(&e)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("fields", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := UnmarshalEvent(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p plainEvent
			if err := unmarshalPlain(data, &p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
