package testenv

import (
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// PeakHeap runs f and returns the most heap the process held meanwhile above what it held
// before, sampled every millisecond. The collector runs at GOGC=10 meanwhile, so that the
// heap in use follows what is live: a worker's soft memory limit (GOMEMLIMIT, 90% of
// MEMORY_LIMIT) has the collector reclaim garbage before the limit is reached, so the live
// heap is what must fit.
func PeakHeap(f func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > base.HeapInuse && m.HeapInuse-base.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse - base.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(stop)
	<-done
	return peak.Load()
}
