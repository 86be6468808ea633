package mq

import "slices"

// TagMode is the kind of a TagFilter.
type TagMode uint8

// The five tag filters. TagAny is the zero value.
const (
	// TagAny accepts every message, tagged or not.
	TagAny TagMode = iota
	// TagDefaultOnly accepts only untagged messages.
	TagDefaultOnly
	// TagOnly accepts only messages tagged with one of the filter's tags.
	TagOnly
	// TagDefaultAnd accepts untagged messages and messages tagged with one of the
	// filter's tags.
	TagDefaultAnd
	// TagNone accepts nothing (a consumer that processes no messages of this queue).
	TagNone
)

// TagFilter selects messages by tag. Build one with AnyTag, DefaultOnly, Tags,
// DefaultAnd or NoTags; the zero value is AnyTag.
type TagFilter struct {
	Mode TagMode  // which messages pass; the zero value is TagAny
	Tags []string // the tags of TagOnly and TagDefaultAnd
}

// AnyTag accepts every message.
func AnyTag() TagFilter { return TagFilter{Mode: TagAny} }

// DefaultOnly accepts untagged messages only.
func DefaultOnly() TagFilter { return TagFilter{Mode: TagDefaultOnly} }

// Tags accepts messages carrying one of tags.
func Tags(tags ...string) TagFilter { return TagFilter{Mode: TagOnly, Tags: tags} }

// DefaultAnd accepts untagged messages and messages carrying one of tags.
func DefaultAnd(tags ...string) TagFilter { return TagFilter{Mode: TagDefaultAnd, Tags: tags} }

// NoTags accepts nothing.
func NoTags() TagFilter { return TagFilter{Mode: TagNone} }

// Accepts reports whether a message with tag ("" = untagged) passes the filter.
func (f TagFilter) Accepts(tag string) bool {
	switch f.Mode {
	case TagAny:
		return true
	case TagDefaultOnly:
		return tag == ""
	case TagOnly:
		return tag != "" && slices.Contains(f.Tags, tag)
	case TagDefaultAnd:
		return tag == "" || slices.Contains(f.Tags, tag)
	default:
		return false
	}
}
