package testenv

import (
	"context"
	"fmt"
	"time"
)

// WaitUntil polls cond every 50 ms until it holds, ctx ends or within passes. cond says
// whether what it waits for holds and, when not, why (an error reading it, or what it
// saw): a timeout's error carries the last one, so a failure shows the value waited on.
// It is the one wait of the end-to-end tests, the API's tests and the benchmark.
func WaitUntil(ctx context.Context, within time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(within)
	for {
		ok, last := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("timed out after %s waiting for %s: %w", within, what, last)
			}
			return fmt.Errorf("timed out after %s waiting for %s", within, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
