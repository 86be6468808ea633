package mqsql

import (
	"sync/atomic"
	"time"
)

// Sweeper paces a cleanup that any write may run (the SQL queues' sweep of expired
// deduplication ids): Due says yes at most once per interval, to one caller.
type Sweeper struct{ last atomic.Int64 }

// Due reports whether a sweep is due at now, every apart, and if so claims it.
func (s *Sweeper) Due(now time.Time, every time.Duration) bool {
	last := s.last.Load()
	return now.UnixNano()-last >= int64(every) && s.last.CompareAndSwap(last, now.UnixNano())
}

// SweepEvery is how often the SQL queues sweep expired deduplication ids, and
// SweepLimit how many one sweep deletes at most.
const (
	SweepEvery = time.Second
	SweepLimit = 1000
)
