package provider

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// formatV1 prefixes every encoded event and work item: msgpack of a struct with
// named fields, so fields can be added without breaking old rows.
const formatV1 byte = 1

func encodeError(what string, err error) error {
	return fmt.Errorf("runtime: encode %s: %w", what, err)
}

func unmarshal(what string, b []byte, v any) error {
	if len(b) == 0 || b[0] != formatV1 {
		return fmt.Errorf("runtime: decode %s: %w: unknown format (first byte %v)", what, ErrCorruptHistory, firstByte(b))
	}
	if err := msgpack.Unmarshal(b[1:], v); err != nil {
		return fmt.Errorf("runtime: decode %s: %w: %v", what, ErrCorruptHistory, err)
	}
	return nil
}

func firstByte(b []byte) any {
	if len(b) == 0 {
		return "none"
	}
	return b[0]
}

// MarshalEvent encodes e in the stored wire format.
func MarshalEvent(e *Event) ([]byte, error) { return encode("event", e.fields) }

// UnmarshalEvent decodes an event; a malformed one gives an error matching
// ErrCorruptHistory.
func UnmarshalEvent(b []byte) (Event, error) {
	var e Event
	err := unmarshal("event", b, &e)
	return e, err
}

// MarshalWorkItem encodes w in the queue wire format.
func MarshalWorkItem(w *WorkItem) ([]byte, error) { return encode("work item", w.fields) }

// UnmarshalWorkItem decodes a work item.
func UnmarshalWorkItem(b []byte) (WorkItem, error) {
	var w WorkItem
	err := unmarshal("work item", b, &w)
	return w, err
}
