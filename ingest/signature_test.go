//go:build integration

package ingest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/models"
)

// GitHub's own example of X-Hub-Signature-256 (docs, "Validating webhook deliveries").
func TestVerifySignatureMatchesGitHubsExample(t *testing.T) {
	t.Parallel()
	d := amqp.Delivery{Body: []byte("Hello, World!"), Headers: amqp.Table{
		headerSignature: "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
	}}
	require.NoError(t, verifySignature(d, []byte("It's a Secret to Everybody")))
	require.ErrorIs(t, verifySignature(d, []byte("another secret")), ErrMalformed)
}

// With a webhook secret, a message is applied only when it carries GitHub's signature of
// its body; one that is unsigned, altered or signed with another secret goes to -error
// with the reason. Without a secret, nothing is verified: unsigned messages are applied.
func TestAWebhookSecretRejectsUnsignedAndForgedPayloads(t *testing.T) {
	e := newEnv(t)
	secret := []byte("the-webhook-secret")
	e.ing.WebhookSecret = secret
	sign := func(d amqp.Delivery, key []byte) amqp.Delivery {
		mac := hmac.New(sha256.New, key)
		mac.Write(d.Body)
		d.Headers[headerSignature] = "sha256=" + hex.EncodeToString(mac.Sum(nil))
		return d
	}
	body := example(t, "pull_request.opened.0")
	altered := sign(delivery("pull_request", "d-altered", body), secret)
	altered.Body = example(t, "pull_request.closed.0")
	verdicts := e.handle(t,
		sign(delivery("pull_request", "d-signed", body), secret),
		delivery("pull_request", "d-unsigned", body),
		sign(delivery("pull_request", "d-other-key", body), []byte("another secret")),
		altered,
	)
	assert.Equal(t, broker.Ack, verdicts[0].Outcome)
	assert.Equal(t, models.OutcomeApplied, e.ledger(t, "d-signed").Outcome)
	for i, want := range map[int]string{1: "no x-hub-signature-256 header", 2: "does not match the body", 3: "does not match the body"} {
		require.Equal(t, broker.Reject, verdicts[i].Outcome, i)
		assert.Contains(t, verdicts[i].Reason, want, i)
		assert.NotContains(t, verdicts[i].Reason, string(secret))
	}
	assert.Equal(t, models.OutcomeError, e.ledger(t, "d-unsigned").Outcome)
	assert.Equal(t, "d-signed", e.pullRequest(t).LastDeliveryID, "only the signed one applied")

	e.ing.WebhookSecret = nil
	verdicts = e.handle(t, delivery("pull_request", "d-closed", example(t, "pull_request.closed.0")))
	assert.Equal(t, broker.Ack, verdicts[0].Outcome, "without a secret, unsigned messages apply")
	assert.Equal(t, "d-closed", e.pullRequest(t).LastDeliveryID)
}
