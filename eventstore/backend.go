package eventstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"time"
)

// This file holds the rules that backends share beyond input checks: the integrity
// check of stored events, the choice of partitions to prune and the deletion plan.
// Application code does not need them.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the integrity check a backend stores with each event: CRC-32C over the
// sequence number, the type and the data. A reader recomputes it; a mismatch means
// the row was damaged (or written by something other than a backend).
func Checksum(seq int64, typ string, data []byte) uint32 {
	var head [8]byte
	binary.BigEndian.PutUint64(head[:], uint64(seq))
	c := crc32.Update(0, castagnoli, head[:])
	c = crc32.Update(c, castagnoli, []byte(typ))
	c = crc32.Update(c, castagnoli, []byte{0}) // separates type from data
	return crc32.Update(c, castagnoli, data)
}

// VerifyEvent returns a *CorruptError for op when a stored event does not match its
// checksum.
func VerifyEvent(op, stream string, partition int64, e Event, sum uint32) error {
	if got := Checksum(e.Seq, e.Type, e.Data); got != sum {
		return &CorruptError{Op: op, Stream: stream, Partition: partition, Seq: e.Seq,
			Reason: fmt.Sprintf("checksum mismatch (stored %08x, computed %08x)", sum, got)}
	}
	return nil
}

// Prunable returns, in ascending order, the partitions Prune removes from a stream
// whose current partition is current and whose partitions are parts (any order).
func Prunable(current int64, parts []PartitionInfo, o PruneOptions) []int64 {
	if !o.CompletedBefore.IsZero() {
		// Stored times have microsecond precision; compare at that precision.
		o.CompletedBefore = time.UnixMicro(o.CompletedBefore.UnixMicro())
	}
	sorted := slices.Clone(parts)
	slices.SortFunc(sorted, func(a, b PartitionInfo) int { return compareInt64(b.Partition, a.Partition) })
	var out []int64
	for i, p := range sorted {
		switch {
		case p.Partition == current, p.Partition > current:
			// The current partition is never pruned (nor anything claiming to be newer).
		case i < o.KeepLast:
		case p.Status == StatusRunning:
			// A running partition still gets events.
		case !o.CompletedBefore.IsZero() && (p.CompletedAt.IsZero() || !p.CompletedAt.Before(o.CompletedBefore)):
		default:
			out = append(out, p.Partition)
		}
	}
	slices.Sort(out)
	return out
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// StreamNode is what the deletion plan needs to know about a stream.
type StreamNode struct {
	Stream string // the stream's id
	Parent string // its parent stream; "" for a root
	Status Status // the status of its current partition (Running refuses a delete without Force)
}

// StreamGraph gives the deletion plan read access to a backend's streams (inside the
// backend's transaction).
type StreamGraph interface {
	// Node returns the stream's node, false if the stream is unknown.
	Node(stream string) (StreamNode, bool, error)
	// Children returns the streams whose parent is stream.
	Children(stream string) ([]string, error)
}

// PlanDelete applies Delete's rules to the listed streams and returns every stream to
// delete (the listed ones and their descendants) in id order, or the error Delete
// must return.
func PlanDelete(op string, g StreamGraph, streams []string, o DeleteOptions) ([]string, error) {
	listed, err := CheckStreams(op, streams)
	if err != nil {
		return nil, err
	}
	nodes := make(map[string]StreamNode)
	for _, s := range listed {
		n, ok, err := g.Node(s)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, NotFound(op, s)
		}
		nodes[s] = n
	}
	tree, err := cascade(g, listed, nodes)
	if err != nil {
		return nil, err
	}
	if !o.AllowNonRoot {
		for _, s := range listed {
			parent := nodes[s].Parent
			if parent == "" || nodes[parent].Stream != "" {
				continue // a root, or its parent goes too
			}
			if _, ok, err := g.Node(parent); err != nil {
				return nil, err
			} else if ok {
				return nil, &RefusedError{Op: op, Stream: s, Kind: ErrNotRoot, Reason: fmt.Sprintf(
					"stream is a child (sub-orchestration) of %q: delete its root %q instead, or set AllowNonRoot", parent, parent)}
			}
		}
	}
	if !o.Force {
		for _, s := range tree {
			if nodes[s].Status == StatusRunning {
				reason := "stream is running: set Force to delete it"
				if !slices.Contains(listed, s) {
					reason = "stream is running and would be deleted as a descendant: set Force to delete it"
				}
				return nil, &RefusedError{Op: op, Stream: s, Kind: ErrRunning, Reason: reason}
			}
		}
	}
	return tree, nil
}

// PlanDeleteWhere returns, in id order, the streams DeleteWhere deletes given the
// candidate roots in selection order: each root with its descendants, skipping roots
// whose tree holds a running stream, until limit roots are taken (0: no limit).
func PlanDeleteWhere(g StreamGraph, candidates []string, limit int) ([]string, error) {
	taken := make(map[string]bool)
	roots := 0
	for _, root := range candidates {
		if limit > 0 && roots >= limit {
			break
		}
		n, ok, err := g.Node(root)
		if err != nil {
			return nil, err
		}
		if !ok || n.Parent != "" || taken[root] {
			continue
		}
		nodes := map[string]StreamNode{root: n}
		tree, err := cascade(g, []string{root}, nodes)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(tree, func(s string) bool { return nodes[s].Status == StatusRunning || taken[s] }) {
			continue
		}
		for _, s := range tree {
			taken[s] = true
		}
		roots++
	}
	out := make([]string, 0, len(taken))
	for s := range taken {
		out = append(out, s)
	}
	slices.Sort(out)
	return out, nil
}

// cascade returns the streams of roots and all their descendants in id order, adding
// their nodes to nodes. A cycle of parent links is walked once.
func cascade(g StreamGraph, roots []string, nodes map[string]StreamNode) ([]string, error) {
	seen := make(map[string]bool)
	queue := slices.Clone(roots)
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		if seen[s] {
			continue
		}
		seen[s] = true
		if _, ok := nodes[s]; !ok {
			n, found, err := g.Node(s)
			if err != nil {
				return nil, err
			}
			if !found {
				continue
			}
			nodes[s] = n
		}
		kids, err := g.Children(s)
		if err != nil {
			return nil, err
		}
		queue = append(queue, kids...)
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		if _, ok := nodes[s]; ok {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out, nil
}
