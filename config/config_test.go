package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func env(vars map[string]string) Getenv { return func(k string) string { return vars[k] } }

func TestDefaults(t *testing.T) {
	c, err := FromEnv(env(nil))
	require.NoError(t, err)
	require.Len(t, c.Brokers, 1)
	require.Equal(t, "127.0.0.1", c.Brokers[0].Host)
	require.Equal(t, "/", c.Brokers[0].Vhost)
	require.Equal(t, []string{"pull_requests", "issues", "pushes", "installations"}, c.Queues)
	require.Equal(t, 5*time.Minute, c.ConsumerWindow)
	require.Equal(t, 10*time.Minute, c.RetryTTL)
	require.Equal(t, 10, c.MaxRetryCycles)
	require.Equal(t, 500, c.LeftoverDrainCap)
	require.Equal(t, "127.0.0.1:7233", c.TemporalAddress)
	require.Equal(t, "brokerswitch", c.TaskQueue)
	require.Equal(t, ":8080", c.HTTPAddr)
	require.Equal(t, 5*time.Minute, c.NotificationMaxClockSkew)
	require.Equal(t, 10, c.DBMaxOpenConns)
	require.Equal(t, 30*time.Second, c.DBStatementTimeout)
	require.Equal(t, 10*time.Second, c.DBLockTimeout)
	require.Equal(t, 25<<20, c.MaxMessageBytes)
	require.Equal(t, 16<<20, c.MaxBatchBytes)
}

func TestBrokersAreSplitByCommasAndNewlines(t *testing.T) {
	c, err := FromEnv(env(map[string]string{
		"RABBITMQ_CONNECTION_STRINGS": "amqp://u:p@a.example.com/one,\namqp://u:p@b.example.com/two\n",
	}))
	require.NoError(t, err)
	require.Len(t, c.Brokers, 2)
	require.Equal(t, 1, c.Brokers[1].Index)
	require.Equal(t, "b.example.com", c.Brokers[1].Host)
}

func TestEveryBadVariableIsNamed(t *testing.T) {
	_, err := FromEnv(env(map[string]string{
		"CONSUMER_WINDOW":         "five minutes",
		"RETRY_TTL":               "-1s",
		"MAX_RETRY_CYCLES":        "0",
		"PREFETCH":                "5000",
		"LEFTOVER_DRAIN_CAP":      "many",
		"DRAIN_CHECK_INTERVAL":    "0s",
		"API_INSECURE_NO_AUTH":    "perhaps",
		"LOG_LEVEL":               "loud",
		"QUEUES":                  " , ",
		"MAX_MESSAGE_BYTES":       "25MB",
		"MAX_BATCH_BYTES":         "-1",
		"UNNOTIFIED_BROKER_GRACE": "0s",
	}))
	require.Error(t, err)
	for _, name := range []string{"CONSUMER_WINDOW", "RETRY_TTL", "MAX_RETRY_CYCLES", "PREFETCH", "LEFTOVER_DRAIN_CAP",
		"DRAIN_CHECK_INTERVAL", "API_INSECURE_NO_AUTH", "LOG_LEVEL", "QUEUES", "MAX_MESSAGE_BYTES", "MAX_BATCH_BYTES", "UNNOTIFIED_BROKER_GRACE"} {
		require.Contains(t, err.Error(), name)
	}
}

func TestABrokerURLErrorNeverShowsThePassword(t *testing.T) {
	_, err := FromEnv(env(map[string]string{
		"RABBITMQ_CONNECTION_STRINGS": "amqp://guest:guest@ok.example.com/,amqp://user:s3cr3t-pw@bad host/vh",
	}))
	require.Error(t, err)
	require.Contains(t, err.Error(), "RABBITMQ_CONNECTION_STRINGS")
	require.NotContains(t, err.Error(), "s3cr3t-pw")
}

func TestTheAPIRefusesToStartWithoutTokens(t *testing.T) {
	c, err := FromEnv(env(nil))
	require.NoError(t, err)
	require.ErrorContains(t, c.ValidateAPIAuth(), "OPERATOR_TOKEN")

	c, err = FromEnv(env(map[string]string{"API_INSECURE_NO_AUTH": "true"}))
	require.NoError(t, err)
	require.NoError(t, c.ValidateAPIAuth())

	c, err = FromEnv(env(map[string]string{"OPERATOR_TOKEN": "operator-token-0123"}))
	require.NoError(t, err)
	require.NoError(t, c.ValidateAPIAuth())
}

func TestTokensAreLongDistinctAndTrimmed(t *testing.T) {
	_, err := FromEnv(env(map[string]string{"OPERATOR_TOKEN": "short-secret", "PRODUCER_TOKEN": "producer-token-0123"}))
	require.ErrorContains(t, err, "OPERATOR_TOKEN: is 12 characters long, at least 16")
	require.NotContains(t, err.Error(), "short-secret", "a token is never quoted")

	_, err = FromEnv(env(map[string]string{"OPERATOR_TOKEN": "the-same-token-0123", "PRODUCER_TOKEN": "the-same-token-0123\n"}))
	require.ErrorContains(t, err, "OPERATOR_TOKEN and PRODUCER_TOKEN are equal")
	require.NotContains(t, err.Error(), "the-same-token")

	// A token read from a file or a Secret ends in a newline; both are trimmed alike.
	c, err := FromEnv(env(map[string]string{"OPERATOR_TOKEN": " operator-token-0123\n", "PRODUCER_TOKEN": "producer-token-0123\r\n"}))
	require.NoError(t, err)
	require.Equal(t, "operator-token-0123", c.OperatorToken)
	require.Equal(t, "producer-token-0123", c.ProducerToken)

	// A Config built in code is checked by the API as well.
	c.ProducerToken = c.OperatorToken
	require.ErrorContains(t, c.ValidateAPIAuth(), "equal")
	c.ProducerToken = "tiny"
	require.ErrorContains(t, c.ValidateAPIAuth(), "PRODUCER_TOKEN")
}

func TestMetricsAndHealthchecks(t *testing.T) {
	c, err := FromEnv(env(nil))
	require.NoError(t, err)
	require.Equal(t, ":9090", c.MetricsAddr)
	require.Empty(t, c.HealthchecksPingURL, "pings are off unless configured")

	c, err = FromEnv(env(map[string]string{"METRICS_ADDR": "127.0.0.1:9191", "HEALTHCHECKS_PING_URL": "https://hc-ping.com/abc"}))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9191", c.MetricsAddr)
	require.Equal(t, "https://hc-ping.com/abc", c.HealthchecksPingURL)

	_, err = FromEnv(env(map[string]string{"HEALTHCHECKS_PING_URL": "hc-ping.com/secret-uuid"}))
	require.ErrorContains(t, err, "HEALTHCHECKS_PING_URL")
	require.NotContains(t, err.Error(), "secret-uuid", "the ping URL is a credential")
}
