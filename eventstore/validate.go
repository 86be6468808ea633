package eventstore

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// The checks below hold the input rules of the contract in one place; every backend
// calls them before touching its storage, so all backends reject the same input with
// the same errors.

// CheckStream validates a stream id for op.
func CheckStream(op, stream string) error {
	return checkName(op, "", "stream", stream, true)
}

// CheckPartition validates a stream id and a partition number for op.
func CheckPartition(op, stream string, partition int64) error {
	if err := CheckStream(op, stream); err != nil {
		return err
	}
	if partition < 1 {
		return invalid(op, stream, "partition", fmt.Sprintf("%d is not a partition number (partitions start at 1)", partition))
	}
	return nil
}

// CheckAppend validates the input of Append.
func CheckAppend(stream string, partition int64, events []Event) error {
	const op = "append"
	if err := CheckPartition(op, stream, partition); err != nil {
		return err
	}
	var prev int64
	for i, e := range events {
		field := func(name string) string { return fmt.Sprintf("event %d: %s", i, name) }
		if e.Seq < 1 {
			return invalid(op, stream, field("Seq"), fmt.Sprintf("%d is not a sequence number (they start at 1)", e.Seq))
		}
		if i > 0 && e.Seq <= prev {
			return invalid(op, stream, field("Seq"),
				fmt.Sprintf("%d does not follow %d: sequence numbers must increase within a call", e.Seq, prev))
		}
		prev = e.Seq
		if len(e.Type) > MaxTypeSize {
			return tooLarge(op, stream, field("Type"), len(e.Type), MaxTypeSize)
		}
		if err := checkText(op, stream, field("Type"), e.Type); err != nil {
			return err
		}
		if len(e.Data) > MaxEventSize {
			return tooLarge(op, stream, field("Data"), len(e.Data), MaxEventSize)
		}
	}
	return nil
}

// CheckUpdate validates the input of Update.
func CheckUpdate(stream string, u StreamUpdate) error {
	const op = "update"
	if err := CheckPartition(op, stream, u.Partition); err != nil {
		return err
	}
	for _, f := range []struct {
		name  string
		value *string
	}{{"Name", u.Name}, {"Version", u.Version}, {"Parent", u.Parent}, {"PinnedVersion", u.PinnedVersion}} {
		if f.value != nil {
			if err := checkName(op, stream, f.name, *f.value, false); err != nil {
				return err
			}
		}
	}
	if u.Parent != nil && *u.Parent == stream {
		return invalid(op, stream, "Parent", "a stream cannot be its own parent")
	}
	if u.Status != nil {
		if err := checkName(op, stream, "Status", string(*u.Status), true); err != nil {
			return err
		}
	}
	if u.Output != nil {
		return checkValue(op, stream, "Output", *u.Output)
	}
	return nil
}

// CheckCustomStatus validates the input of SetCustomStatus.
func CheckCustomStatus(stream string, value *string) error {
	const op = "set custom status"
	if err := CheckStream(op, stream); err != nil {
		return err
	}
	if value != nil {
		return checkValue(op, stream, "value", *value)
	}
	return nil
}

// CheckKV validates the input of ApplyKV.
func CheckKV(stream string, partition int64, muts []KVMutation) error {
	const op = "apply kv"
	if err := CheckPartition(op, stream, partition); err != nil {
		return err
	}
	for i, m := range muts {
		field := func(name string) string { return fmt.Sprintf("mutation %d: %s", i, name) }
		switch m.Op {
		case KVSet, KVClear:
			if err := checkName(op, stream, field("Key"), m.Key, true); err != nil {
				return err
			}
		case KVClearAll:
		default:
			return invalid(op, stream, field("Op"), fmt.Sprintf("unknown operation %d", m.Op))
		}
		if err := checkValue(op, stream, field("Value"), m.Value); err != nil {
			return err
		}
	}
	return nil
}

// CheckKey validates a stream id and a KV key for op.
func CheckKey(op, stream, key string) error {
	if err := CheckStream(op, stream); err != nil {
		return err
	}
	return checkName(op, stream, "key", key, true)
}

// CheckFilter validates a StreamFilter for op.
func CheckFilter(op string, f StreamFilter) error {
	if f.Limit < 0 {
		return invalid(op, "", "Limit", fmt.Sprintf("negative limit %d", f.Limit))
	}
	for _, c := range []struct{ field, value string }{{"Name", f.Name}, {"IDPrefix", f.IDPrefix}, {"Parent", f.Parent}, {"After", f.After}} {
		if len(c.value) > MaxNameSize {
			return invalid(op, "", c.field, fmt.Sprintf("%d bytes, more than MaxNameSize (%d)", len(c.value), MaxNameSize))
		}
	}
	return nil
}

// CheckDeleteFilter validates the filter of DeleteWhere, which selects root streams.
func CheckDeleteFilter(f StreamFilter) error {
	const op = "delete where"
	if err := CheckFilter(op, f); err != nil {
		return err
	}
	if f.Parent != "" {
		return invalid(op, "", "Parent", "DeleteWhere selects root streams; delete children through their root")
	}
	return nil
}

// CheckPrune validates PruneOptions for op.
func CheckPrune(op, stream string, o PruneOptions) error {
	if o.KeepLast < 0 {
		return invalid(op, stream, "KeepLast", fmt.Sprintf("negative count %d", o.KeepLast))
	}
	return nil
}

// CheckStreams validates a list of stream ids for op and returns it sorted and
// without duplicates.
func CheckStreams(op string, streams []string) ([]string, error) {
	for i, s := range streams {
		if err := checkName(op, "", fmt.Sprintf("streams[%d]", i), s, true); err != nil {
			return nil, err
		}
	}
	out := slices.Clone(streams)
	slices.Sort(out)
	return slices.Compact(out), nil
}

func checkName(op, stream, field, v string, required bool) error {
	if v == "" && required {
		return invalid(op, stream, field, "must not be empty")
	}
	if len(v) > MaxNameSize {
		return tooLarge(op, stream, field, len(v), MaxNameSize)
	}
	return checkText(op, stream, field, v)
}

func checkValue(op, stream, field, v string) error {
	if len(v) > MaxValueSize {
		return tooLarge(op, stream, field, len(v), MaxValueSize)
	}
	return checkText(op, stream, field, v)
}

// checkText enforces the rule for every string the store keeps: valid UTF-8 without
// NUL bytes, which every SQL text column (PostgreSQL's included) can hold verbatim.
// Opaque bytes belong in Event.Data.
func checkText(op, stream, field, v string) error {
	if !utf8.ValidString(v) {
		return invalid(op, stream, field, "must be valid UTF-8")
	}
	if strings.IndexByte(v, 0) >= 0 {
		return invalid(op, stream, field, "must not contain NUL bytes")
	}
	return nil
}

func invalid(op, stream, field, reason string) error {
	return &InvalidError{Op: op, Stream: stream, Field: field, Reason: reason}
}

func tooLarge(op, stream, field string, size, limit int) error {
	return &InvalidError{Op: op, Stream: stream, Field: field, TooLarge: true,
		Reason: fmt.Sprintf("%d bytes exceeds the limit of %d bytes", size, limit)}
}
