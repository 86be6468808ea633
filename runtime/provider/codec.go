package provider

import (
	"fmt"
)

// formatV1 prefixes every encoded event and work item: msgpack of a struct with
// named fields, so fields can be added without breaking old rows.
const formatV1 byte = 1

func encodeError(what string, err error) error {
	return fmt.Errorf("runtime: encode %s: %w", what, err)
}

// decodeError wraps ErrCorruptHistory; first, when not nil, is the format byte.
func decodeError(what string, err error, first any) error {
	if first != nil {
		return fmt.Errorf("runtime: decode %s: %w: %v (first byte %v)", what, ErrCorruptHistory, err, first)
	}
	return fmt.Errorf("runtime: decode %s: %w: %v", what, ErrCorruptHistory, err)
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
	err := decode("event", b, e.field)
	return e, err
}

// MarshalWorkItem encodes w in the queue wire format.
func MarshalWorkItem(w *WorkItem) ([]byte, error) { return encode("work item", w.fields) }

// UnmarshalWorkItem decodes a work item.
func UnmarshalWorkItem(b []byte) (WorkItem, error) {
	var w WorkItem
	err := decode("work item", b, w.field)
	return w, err
}
