package models

// Check is a statement that a batch's transaction runs last, just before its COMMIT: it
// fails inside Postgres unless what the batch relies on still holds (its attempt still
// holds the queue, its broker is still a spare), so that it travels in one exchange with
// the batch's writes and the failure rolls them back.
type Check struct {
	// Query is the statement, with $n placeholders, and Args its arguments.
	Query string
	Args  []any
	// Refused returns the check's refusal as an error of its own, or nil for any other err.
	Refused func(err error) error
}
