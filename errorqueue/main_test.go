package errorqueue

import (
	"testing"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Exit(m.Run()) }
