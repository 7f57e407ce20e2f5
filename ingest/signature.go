package ingest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// headerSignature carries GitHub's X-Hub-Signature-256 of the body, as the producer
// forwards it: "sha256=" and the hex HMAC-SHA256 of the body under the webhook's secret.
const headerSignature = "x-hub-signature-256"

// verifySignature checks d's body against headerSignature under secret. It fails, wrapping
// ErrMalformed, when the header is missing, does not parse or does not match: with a
// secret configured, a message without GitHub's signature may be forged. The error never
// quotes the secret or the signature.
func verifySignature(d amqp.Delivery, secret []byte) error {
	raw, ok := d.Headers[headerSignature]
	if !ok {
		return fmt.Errorf("%w: no %s header, and WEBHOOK_SECRET is set: the payload cannot be authenticated", ErrMalformed, headerSignature)
	}
	v, ok := headerString(raw)
	hexSig, found := strings.CutPrefix(strings.TrimSpace(v), "sha256=")
	got, err := hex.DecodeString(hexSig)
	if !ok || !found || err != nil || len(got) != sha256.Size {
		return fmt.Errorf("%w: %s is not \"sha256=\" and 64 hex digits", ErrMalformed, headerSignature)
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(d.Body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return fmt.Errorf("%w: %s does not match the body under WEBHOOK_SECRET: forged, altered, or signed with another secret", ErrMalformed, headerSignature)
	}
	return nil
}
