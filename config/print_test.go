package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// However a Config is printed or logged, whole or by pointer, no secret shows.
func TestAConfigPrintsNoSecret(t *testing.T) {
	secrets := map[string]string{
		"RABBITMQ_CONNECTION_STRINGS": "amqp://user:broker-pw-5ecret@rabbit.example.com/vh",
		"DATABASE_URL":                "postgres://app:db-pw-5ecret@db.example.com/brokerswitch",
		"OPERATOR_TOKEN":              "operator-token-5ecret",
		"PRODUCER_TOKEN":              "producer-token-5ecret",
		"TEMPORAL_API_KEY":            "temporal-key-5ecret",
		"HEALTHCHECKS_PING_URL":       "https://hc-ping.com/ping-uuid-5ecret",
		"WEBHOOK_SECRET":              "webhook-5ecret",
	}
	c, err := FromEnv(env(secrets))
	require.NoError(t, err)

	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "config", c, "ptr", &c)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "config", c)
	js, _ := json.Marshal(c)
	for _, text := range []string{
		logs.String(), string(js), c.String(), c.GoString(),
		fmt.Sprintf("%v %+v %#v %s %q %x", c, c, c, c, c, c),
		fmt.Sprintf("%v %+v %#v %s", &c, &c, &c, &c),
	} {
		require.Contains(t, text, "rabbit.example.com", "the printed form still says something")
		require.NotContains(t, text, "5ecret", text)
	}
}
