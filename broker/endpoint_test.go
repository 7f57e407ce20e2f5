package broker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseEndpoints(t *testing.T) {
	eps, err := ParseEndpoints(" amqps://u1:s3cret@Foo.RMQ.CloudAMQP.com/u1vh ,\n\n" +
		"amqp://u2:pw2@bar.example:1234\r\n,amqp://u3:pw3@Bar.example/my%2Fvh%20x,")
	require.NoError(t, err)
	require.Len(t, eps, 3)

	assert.Equal(t, Endpoint{Index: 0, URL: "amqps://u1:s3cret@Foo.RMQ.CloudAMQP.com/u1vh",
		Host: "foo.rmq.cloudamqp.com", Port: 5671, Vhost: "u1vh"}, eps[0])
	assert.Equal(t, Endpoint{Index: 1, URL: "amqp://u2:pw2@bar.example:1234",
		Host: "bar.example", Port: 1234, Vhost: "/"}, eps[1])
	assert.Equal(t, "my/vh x", eps[2].Vhost)
	assert.Equal(t, 5672, eps[2].Port)

	assert.Equal(t, "#0 foo.rmq.cloudamqp.com:5671/u1vh", eps[0].String())
	assert.Equal(t, "#1 bar.example:1234/", eps[1].String())
	assert.Equal(t, "#2 bar.example:5672/my%2Fvh%20x", eps[2].String())
}

func TestParseEndpointsErrorsHideThePassword(t *testing.T) {
	for name, in := range map[string]string{
		"bad scheme":      "amqp://a:pw0@h/v, http://user:topsecret@host/vh",
		"bad port":        "amqp://a:pw0@h/v\namqp://user:topsecret@host:99999999999/vh",
		"bad url":         "amqp://a:pw0@h/v,amqp://user:topsecret@ho%zzst/vh",
		"bad escape":      "amqp://a:pw0@h/v,amqp://user:top%secret@host/vh",
		"bad heartbeat":   "amqp://a:pw0@h/v,amqp://user:topsecret@host/vh?heartbeat=x",
		"same host+vhost": "amqp://a:pw0@h/v,amqp://user:topsecret@H/%76",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseEndpoints(in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "broker #1")
			assert.NotContains(t, err.Error(), "topsecret")
			assert.NotContains(t, err.Error(), "secret")
			assert.NotContains(t, err.Error(), "pw0")
		})
	}
	_, err := ParseEndpoints(" ,\n ")
	assert.Error(t, err)
}

func TestEndpointNeverPrintsItsURL(t *testing.T) {
	eps, err := ParseEndpoints("amqp://user:topsecret@host/vh")
	require.NoError(t, err)
	ep := eps[0]

	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "broker", ep)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "broker", ep)
	js, err := json.Marshal(ep)
	require.NoError(t, err)
	for _, s := range []string{logs.String(), string(js), fmt.Sprintf("%v %+v %#v %s", ep, ep, ep, ep)} {
		assert.NotContains(t, s, "topsecret")
		assert.Contains(t, s, "host")
	}
	assert.Contains(t, logs.String(), "#0 host:5672/vh")
}

func TestEndpointMatches(t *testing.T) {
	eps, err := ParseEndpoints("amqp://u:p@Host.Example/, amqp://u:p@host.example/a%2Fb, amqp://u:p@other/vh")
	require.NoError(t, err)

	assert.True(t, eps[0].matches("HOST.example", ""))
	assert.True(t, eps[0].matches("host.example", "/"))
	assert.True(t, eps[0].matches("host.example", "%2F"))
	assert.False(t, eps[0].matches("host.example", "a/b"))
	assert.True(t, eps[1].matches("host.example", "a%2Fb"))
	assert.True(t, eps[1].matches("host.example", "a/b"))
	assert.False(t, eps[2].matches("host.example", "vh"))

	ep, ok := FindEndpoint(eps, "OTHER", "vh")
	require.True(t, ok)
	assert.Equal(t, 2, ep.Index)
	_, ok = FindEndpoint(eps, "nowhere", "vh")
	assert.False(t, ok)
}
