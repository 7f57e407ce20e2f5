package testenv

// T is what testenv needs of a test. *testing.T and *testing.B satisfy it, and so does a
// program that uses the same services outside `go test` (bench/'s scope).
type T interface {
	Helper()
	// Cleanup registers f to run when the test ends, the last registered first.
	Cleanup(f func())
	// Errorf reports a failure and lets the test go on.
	Errorf(format string, args ...any)
	// Fatalf reports a failure and ends the test: it does not return.
	Fatalf(format string, args ...any)
}
