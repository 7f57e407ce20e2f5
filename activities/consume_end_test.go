package activities

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/liveness"
)

// A window that ends while it still asks for the exclusive consumer a paused worker holds
// ends normally, unless it was fenced; a live window, or another error, is no normal end.
func TestAWindowThatEndsWhileItAsksForTheConsumerEndsNormally(t *testing.T) {
	refused := fmt.Errorf("consume issues: %w", broker.ErrExclusiveConsumer)
	ended := func(cause error) context.Context {
		ctx, end := context.WithCancelCause(context.Background())
		end(cause)
		return ctx
	}
	require.True(t, endedWhileAsking(ended(errSwitched), refused))
	require.True(t, endedWhileAsking(ended(errStraggler), refused))
	require.True(t, endedWhileAsking(ended(nil), refused), "the window's length")
	require.False(t, endedWhileAsking(ended(fmt.Errorf("%w: the worker's lease was lost", liveness.ErrLost)), refused), "a fenced attempt is not a normal end")
	require.False(t, endedWhileAsking(context.Background(), refused), "a live window asks on, or fails")
	require.False(t, endedWhileAsking(ended(errSwitched), errors.New("boom")))
	require.False(t, endedWhileAsking(ended(errSwitched), nil))
}
