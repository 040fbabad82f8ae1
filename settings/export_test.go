package settings

// FlushObserved returns once s handled every observed change queued before the
// call (WithObservedHistory), so a test can check the history without waiting
// for time to pass.
func FlushObserved(s *Settings) {
	done := make(chan struct{})
	s.mu.Lock()
	s.observed.push(observation{flushed: done})
	s.mu.Unlock()
	<-done
}
