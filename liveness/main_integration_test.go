//go:build integration

package liveness_test

import (
	"testing"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// temporalServer is the dev server of this test binary, for the tests that need a real
// Temporal (a lost poll's answer); the others stand in for it with a TemporalReach.
var temporalServer *testenv.Temporal

func TestMain(m *testing.M) { testenv.MainWithTemporal(m, &temporalServer) }
