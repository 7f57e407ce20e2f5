//go:build !integration

package liveness_test

import (
	"testing"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Exit(testenv.Run(m)) }
