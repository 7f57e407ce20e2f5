package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
)

func env(vars map[string]string) Getenv { return func(k string) string { return vars[k] } }

// The default values are written once, in docs/configuration.md, which
// TestTheDocumentedDefaultsAreFromEnvs holds to FromEnv; here the exported constants
// are held to FromEnv too.
func TestTheExportedDefaultsAreFromEnvs(t *testing.T) {
	c, err := FromEnv(env(nil))
	require.NoError(t, err)
	require.Equal(t, DefaultWorkerLeaseTTL, c.WorkerLeaseTTL)
	require.Equal(t, DefaultUnnotifiedBrokerGrace, c.UnnotifiedBrokerGrace)
	require.Equal(t, DefaultNotificationMaxClockSkew, c.NotificationMaxClockSkew)
	require.Equal(t, DefaultAMQPHeartbeat, c.AMQPHeartbeat)
	require.Equal(t, DefaultPrefetch, c.Prefetch)
}

func TestQueueType(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"QUEUE_TYPE": "quorum"}))
	require.NoError(t, err)
	require.Equal(t, broker.Quorum, c.QueueType)
	_, err = FromEnv(env(map[string]string{"QUEUE_TYPE": "Quorum"}))
	require.ErrorContains(t, err, `QUEUE_TYPE: "Quorum": must be "classic" or "quorum"`)
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
		"CONSUMER_WINDOW":                "five minutes",
		"RETRY_TTL":                      "-1s",
		"MAX_RETRY_CYCLES":               "0",
		"PREFETCH":                       "5000",
		"LEFTOVER_DRAIN_CAP":             "many",
		"DRAIN_CHECK_INTERVAL":           "0s",
		"API_INSECURE_NO_AUTH":           "perhaps",
		"LOG_LEVEL":                      "loud",
		"QUEUES":                         " , ",
		"MAX_MESSAGE_BYTES":              "25MB",
		"MAX_BATCH_BYTES":                "-1",
		"UNNOTIFIED_BROKER_GRACE":        "0s",
		"DB_IDLE_IN_TRANSACTION_TIMEOUT": "5",
	}))
	require.Error(t, err)
	for _, name := range []string{"CONSUMER_WINDOW", "RETRY_TTL", "MAX_RETRY_CYCLES", "PREFETCH", "LEFTOVER_DRAIN_CAP",
		"DRAIN_CHECK_INTERVAL", "API_INSECURE_NO_AUTH", "LOG_LEVEL", "QUEUES", "MAX_MESSAGE_BYTES", "MAX_BATCH_BYTES", "UNNOTIFIED_BROKER_GRACE",
		"DB_IDLE_IN_TRANSACTION_TIMEOUT"} {
		require.Contains(t, err.Error(), name)
	}
}

// DB_IDLE_IN_TRANSACTION_TIMEOUT is a duration Postgres takes: at most INT_MAX milliseconds.
func TestIdleInTransactionTimeout(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"DB_IDLE_IN_TRANSACTION_TIMEOUT": "2s"}))
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, c.DBIdleInTransactionTimeout)
	_, err = FromEnv(env(map[string]string{"DB_IDLE_IN_TRANSACTION_TIMEOUT": "600h"}))
	require.ErrorContains(t, err, `config: DB_IDLE_IN_TRANSACTION_TIMEOUT: "600h" is longer than 596h31m23.647s`)
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

// A retention shorter than the -retry path is refused with the arithmetic that bounds it.
func TestLedgerRetentionShorterThanTheRetryPathIsRefused(t *testing.T) {
	_, err := FromEnv(env(map[string]string{"LEDGER_RETENTION": "25h", "RETRY_TTL": "10m", "MAX_RETRY_CYCLES": "12"}))
	require.Error(t, err)
	require.Contains(t, err.Error(), "LEDGER_RETENTION: 25h0m0s is shorter than the longest redelivery path")
	require.Contains(t, err.Error(), "10m0s × 12 + 24h0m0s = 26h0m0s")

	c, err := FromEnv(env(map[string]string{"LEDGER_RETENTION": "26h", "RETRY_TTL": "10m", "MAX_RETRY_CYCLES": "12"}))
	require.NoError(t, err)
	require.Equal(t, 26*time.Hour, c.LedgerRetention)

	_, err = FromEnv(env(map[string]string{"LEDGER_RETENTION": "7 days"}))
	require.ErrorContains(t, err, "LEDGER_RETENTION")
}

// Secrets can come from mounted files: NAME_FILE names the file.
func TestSecretsFromFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		return path
	}
	c, err := FromEnv(env(map[string]string{
		"DATABASE_URL_FILE":                write("db", "postgres://u:db-secret@db.example.com/x?sslmode=verify-full\n"),
		"RABBITMQ_CONNECTION_STRINGS_FILE": write("brokers", "amqps://u:p@a.example.com/one\n"),
		"OPERATOR_TOKEN_FILE":              write("op", "operator-token-from-a-file\n"),
		"PRODUCER_TOKEN_FILE":              write("prod", "producer-token-from-a-file\n"),
		"TEMPORAL_API_KEY_FILE":            write("key", "temporal-key-from-a-file\n"),
	}))
	require.NoError(t, err)
	require.Equal(t, "postgres://u:db-secret@db.example.com/x?sslmode=verify-full", c.DatabaseURL)
	require.Equal(t, "a.example.com", c.Brokers[0].Host)
	require.Equal(t, "operator-token-from-a-file", c.OperatorToken)
	require.Equal(t, "producer-token-from-a-file", c.ProducerToken)
	require.NotNil(t, c.Temporal.Credentials, "TEMPORAL_API_KEY_FILE reaches the Temporal client's envconfig")

	t.Run("both set", func(t *testing.T) {
		_, err := FromEnv(env(map[string]string{"OPERATOR_TOKEN": "operator-token-in-env", "OPERATOR_TOKEN_FILE": write("op2", "operator-token-in-file")}))
		require.ErrorContains(t, err, "OPERATOR_TOKEN and OPERATOR_TOKEN_FILE are both set")
		require.NotContains(t, err.Error(), "operator-token-in")
	})
	t.Run("unreadable", func(t *testing.T) {
		_, err := FromEnv(env(map[string]string{"DATABASE_URL_FILE": filepath.Join(dir, "missing")}))
		require.ErrorContains(t, err, "DATABASE_URL_FILE: cannot read the file with DATABASE_URL")
	})
	t.Run("the ping URL from a file", func(t *testing.T) {
		c, err := FromEnv(env(map[string]string{"HEALTHCHECKS_PING_URL_FILE": write("ping", "https://hc-ping.com/uuid-from-a-file\n")}))
		require.NoError(t, err)
		require.Equal(t, "https://hc-ping.com/uuid-from-a-file", c.HealthchecksPingURL)
		c, err = FromEnv(env(map[string]string{"WEBHOOK_SECRET_FILE": write("hook", "the-webhook-secret\n")}))
		require.NoError(t, err)
		require.Equal(t, "the-webhook-secret", c.WebhookSecret)
	})
	// An optional Secret volume leaves out the keys the Secret lacks.
	t.Run("an optional secret's missing file leaves it unset", func(t *testing.T) {
		c, err := FromEnv(env(map[string]string{
			"HEALTHCHECKS_PING_URL_FILE": filepath.Join(dir, "missing"),
			"TEMPORAL_API_KEY_FILE":      filepath.Join(dir, "missing"),
			"WEBHOOK_SECRET_FILE":        filepath.Join(dir, "missing"),
		}))
		require.NoError(t, err)
		require.Empty(t, c.HealthchecksPingURL)
		require.Empty(t, c.WebhookSecret)
		require.Nil(t, c.Temporal.Credentials)
	})
	t.Run("a token from a file is checked like one from the environment", func(t *testing.T) {
		_, err := FromEnv(env(map[string]string{"PRODUCER_TOKEN_FILE": write("short", "short-secret\n")}))
		require.ErrorContains(t, err, "PRODUCER_TOKEN: is 12 characters long")
		require.NotContains(t, err.Error(), "short-secret")
	})
}

// Plain amqp:// to a host that is not loopback is warned of at start.
func TestPlaintextBrokers(t *testing.T) {
	c, err := FromEnv(env(map[string]string{
		"RABBITMQ_CONNECTION_STRINGS": "amqp://u:p@127.0.0.1/a,amqp://u:p@localhost/b,amqp://u:p@[::1]/c,amqps://u:p@tls.example.com/d,amqp://u:p@plain.example.com/e,AMQP://u:p@10.0.0.5/f",
	}))
	require.NoError(t, err)
	var hosts []string
	for _, ep := range c.PlaintextBrokers() {
		hosts = append(hosts, ep.Host)
	}
	require.Equal(t, []string{"plain.example.com", "10.0.0.5"}, hosts)
}
