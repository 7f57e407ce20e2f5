package rawamqp

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// The client that moves messages to -error logs in as amqp091-go would: with a client
// certificate when the URL asks for EXTERNAL, and refuses clearly what it does not speak.
func TestTheRawClientHonoursTheURLsAuthMechanism(t *testing.T) {
	for raw, want := range map[string]string{
		"amqps://u:pw@h/":                                             "PLAIN",
		"amqps://h/?auth_mechanism=external":                          "EXTERNAL",
		"amqps://u:pw@h/?auth_mechanism=EXTERNAL":                     "EXTERNAL",
		"amqp://u:pw@h/?auth_mechanism=amqplain&auth_mechanism=plain": "PLAIN",
	} {
		uri, err := amqp.ParseURI(raw)
		require.NoError(t, err)
		mechanism, response, err := auth(uri)
		require.NoError(t, err)
		require.Equal(t, want, mechanism, raw)
		if want == "EXTERNAL" {
			require.Empty(t, response, "EXTERNAL sends no password")
		}
	}
	uri, err := amqp.ParseURI("amqp://u:pw@h/?auth_mechanism=amqplain")
	require.NoError(t, err)
	_, _, err = auth(uri)
	require.ErrorContains(t, err, "auth_mechanism")
}
