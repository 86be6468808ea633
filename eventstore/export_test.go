package eventstore

// CorruptMemoryEvent damages one stored event of m, as a bad disk would, so that its
// integrity check fails. It reports whether the event exists.
func CorruptMemoryEvent(m *Memory, stream string, partition, seq int64) bool {
	tx := m.domain.Begin()
	defer tx.Commit()
	s := m.streams[stream]
	if s == nil || s.parts[partition] == nil {
		return false
	}
	p := s.parts[partition]
	for i := range p.events {
		if p.events[i].seq == seq {
			// A copy: the old slice may still be shared with an undo record.
			p.events[i].data = append([]byte("\xde\xad"), p.events[i].data...)
			return true
		}
	}
	return false
}
