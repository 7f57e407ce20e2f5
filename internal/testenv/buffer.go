package testenv

import (
	"bytes"
	"sync"
)

// Buffer is a log destination that a test reads while the code under test writes to it
// from other goroutines.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tail keeps the last tailBytes written to it: what a process said last.
type tail struct {
	mu sync.Mutex
	b  []byte
}

const tailBytes = 4 << 10

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > tailBytes {
		w.b = append(w.b[:0:0], w.b[len(w.b)-tailBytes:]...)
	}
	return len(p), nil
}

// Reset forgets what was written.
func (w *tail) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = nil
}

// String returns the last tailBytes written.
func (w *tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}
