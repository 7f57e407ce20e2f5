package config

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A product that overflows 64 bits wraps to a small number and would pass its check.
func TestSettingsWhoseArithmeticOverflowsAreRefused(t *testing.T) {
	_, err := FromEnv(env(map[string]string{"MAX_MESSAGE_BYTES": "9223372036854775807", "MEMORY_LIMIT": "256Mi"}))
	require.ErrorContains(t, err, "config: MAX_MESSAGE_BYTES:")

	_, err = FromEnv(env(map[string]string{"MAX_MESSAGE_BYTES": "1073741824", "PREFETCH": "500", "QUEUES": strings.Repeat("q,", 9) + "q",
		"MAX_BATCH_BYTES": "9223372036854775807", "MEMORY_LIMIT": "256Mi"}))
	require.ErrorContains(t, err, "config: MAX_BATCH_BYTES:")

	_, err = FromEnv(env(map[string]string{"RETRY_TTL": "2562047h", "MAX_RETRY_CYCLES": "9"}))
	require.ErrorContains(t, err, "config: RETRY_TTL:")
}

func TestNumbersThatAreNotNumbersAreRefused(t *testing.T) {
	for _, v := range []string{"NaN", "nan", "Inf", "+Inf", "-Inf", "infinity", "-1", "0", "1e400"} {
		_, err := FromEnv(env(map[string]string{"NOTIFICATION_RATE": v}))
		require.ErrorContains(t, err, "config: NOTIFICATION_RATE: \""+v+"\"", v)
	}
}

// FuzzFromEnvNumbers sets numeric variables to anything: FromEnv refuses the value,
// naming a variable, or returns a Config whose numbers and products are in range.
func FuzzFromEnvNumbers(f *testing.F) {
	f.Add(uint8(0), "9223372036854775807", uint8(1), "256Mi", "4")
	f.Add(uint8(2), "NaN", uint8(1), "512Mi", "1")
	f.Add(uint8(3), "2562047h", uint8(4), "9", "2")
	f.Add(uint8(5), "500", uint8(0), "1073741824", "10")
	f.Add(uint8(6), "-Inf", uint8(7), "1e308", "1")
	f.Add(uint8(8), "106751d", uint8(9), "0x10", "3")
	f.Fuzz(func(t *testing.T, n1 uint8, v1 string, n2 uint8, v2 string, queues string) {
		vars := map[string]string{
			numericVariables[int(n1)%len(numericVariables)]: v1,
			numericVariables[int(n2)%len(numericVariables)]: v2,
		}
		if k, err := strconv.Atoi(queues); err == nil && k > 0 && k <= 64 {
			vars["QUEUES"] = strings.TrimSuffix(strings.Repeat("q,", k), ",")
		}
		c, err := FromEnv(env(vars))
		if err != nil {
			require.True(t, strings.HasPrefix(err.Error(), "config: "), err.Error())
			return
		}
		requireInRange(t, c)
	})
}

// numericVariables are the variables FromEnv reads as numbers, durations or sizes.
var numericVariables = []string{
	"MAX_MESSAGE_BYTES", "MEMORY_LIMIT", "NOTIFICATION_RATE", "RETRY_TTL", "MAX_RETRY_CYCLES",
	"PREFETCH", "MAX_BATCH_BYTES", "NOTIFICATION_BURST", "LEDGER_RETENTION", "DB_MAX_OPEN_CONNS",
	"CONSUMER_WINDOW", "WORKER_LEASE_TTL", "AMQP_HEARTBEAT", "LEFTOVER_DRAIN_CAP", "DB_STATEMENT_TIMEOUT",
	"UNNOTIFIED_BROKER_GRACE", "NOTIFICATION_MAX_CLOCK_SKEW", "WORKER_STOP_TIMEOUT", "DRAIN_CHECK_INTERVAL",
	"SPARE_CHECK_INTERVAL", "DB_LOCK_TIMEOUT", "DB_IDLE_IN_TRANSACTION_TIMEOUT",
}

func requireInRange(t *testing.T, c Config) {
	t.Helper()
	require.False(t, math.IsNaN(c.NotificationRate) || math.IsInf(c.NotificationRate, 0) || c.NotificationRate <= 0, "NOTIFICATION_RATE %v", c.NotificationRate)
	for _, n := range []int{c.DBMaxOpenConns, c.MaxRetryCycles, c.Prefetch, c.MaxMessageBytes, c.MaxBatchBytes, c.NotificationBurst, c.LeftoverDrainCap} {
		require.Positive(t, n)
	}
	for _, d := range []time.Duration{c.DBStatementTimeout, c.DBLockTimeout, c.DBIdleInTransactionTimeout, c.ConsumerWindow, c.SpareCheckInterval, c.RetryTTL,
		c.LedgerRetention, c.WorkerLeaseTTL, c.AMQPHeartbeat, c.WorkerStopTimeout, c.DrainCheckInterval,
		c.NotificationMaxClockSkew, c.UnnotifiedBrokerGrace} {
		require.Positive(t, d)
		require.LessOrEqual(t, d, maxDuration)
	}
	require.GreaterOrEqual(t, c.LedgerRetention, minLedgerRetention(c.RetryTTL, c.MaxRetryCycles))
	require.Positive(t, minLedgerRetention(c.RetryTTL, c.MaxRetryCycles))
	worst, _ := c.WorstCaseMemory()
	require.Positive(t, worst)
	require.GreaterOrEqual(t, worst, int64(processAllowance))
	if c.MemoryLimit > 0 {
		require.LessOrEqual(t, worst, c.SoftMemoryLimit())
	}
}
