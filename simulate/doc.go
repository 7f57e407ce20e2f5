// Package simulate is a producer simulator: it publishes real GitHub webhook payloads to
// the brokers exactly as the producer (WebhooksHandler) does, rotates from broker to
// broker, tells brokerswitch where it went (POST /api/v1/broker/pending-switch), and
// writes a log of everything it published, in order.
//
// It serves two kinds of users. Operators run `brokerswitch simulate` against a test
// deployment to rehearse a rotation; the end-to-end tests drive a Producer directly and
// compute from its log what the typed tables must hold.
//
// The message contract it follows: one durable queue per logical queue with its -retry
// and -error siblings (broker.Pool.DeclareTopology, with the same RETRY_TTL as the
// consumer), messages published to the default exchange with the logical queue as routing
// key, persistent, content type application/json, and the headers x-github-event and
// x-github-delivery. The message id is the delivery id too, so that a poison message
// without its x-github-delivery header can still be found in -error.
package simulate
