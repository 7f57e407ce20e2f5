package testenv

import (
	"fmt"
	"net/http"
	"os"

	"go.uber.org/goleak"
)

// Exit ends a test binary with code, its m.Run's, after it fails a green run that left
// goroutines running: a consumer, a watcher, a pool or a server a test did not stop.
// Every package's TestMain ends with it, after it stopped what it started itself.
func Exit(code int) {
	if code == 0 {
		// Keep-alive connections of the shared HTTP client (the RabbitMQ management API)
		// are the process's, not a test's: each holds a reader goroutine until closed.
		http.DefaultClient.CloseIdleConnections()
		if err := goleak.Find(leakOptions()...); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakOptions are the goroutines that belong to the process rather than to a test: none
// so far, so every goroutine left is a test's.
func leakOptions() []goleak.Option {
	return nil
}
