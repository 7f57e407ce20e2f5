//go:build race

package ingest

// raceDetector tells whether the tests run under the race detector, which changes what
// a decode allocates: sync.Pool drops items at random under it.
const raceDetector = true
